-- In-doubt sends resolved by a person: an item left 'unverified' (the gateway could not say
-- whether it delivered) is decided by a tech_admin from what is known.
--
--   delivered     → unverified → confirmed ('ItemResolvedDelivered'); the ledger entry is
--                   kept and marked sent, so its idempotency key can never be sent again.
--   not delivered → unverified → pending ('ItemResolvedNotDelivered') through the guarded
--                   transition, which re-publishes its command; the ledger reservation is
--                   released so the send can be made again under the same key.
-- The audit record is written by the caller in the same transaction.

INSERT INTO item_transitions (from_status, to_status) VALUES ('unverified', 'confirmed'), ('unverified', 'pending');

CREATE FUNCTION pacer_resolve_unverified(p_item uuid, p_delivered boolean, p_actor text, p_reason text)
RETURNS TABLE (outcome text, message text, status text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    i items%ROWTYPE;
BEGIN
    SELECT * INTO i FROM items WHERE item_id = p_item FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, format('no item %s', p_item), NULL::text;
        RETURN;
    END IF;
    IF i.status <> 'unverified' THEN
        RETURN QUERY SELECT 'conflict'::text,
            format('item is %s, not unverified; only an in-doubt send is resolved by hand', i.status), i.status::text;
        RETURN;
    END IF;
    IF p_delivered THEN
        PERFORM pacer_transition(ARRAY[p_item], '{unverified}', 'confirmed', 'ItemResolvedDelivered',
            jsonb_build_object('actor', p_actor, 'reason', p_reason), p_clear_lease => true);
        UPDATE send_ledger SET state = 'sent', sent_at = COALESCE(sent_at, now())
        WHERE idem_key = i.idem_key AND item_id = p_item;
        RETURN QUERY SELECT 'done'::text, format('item %s resolved as delivered: confirmed; its key stays used', p_item),
            'confirmed'::text;
    ELSE
        DELETE FROM send_ledger WHERE idem_key = i.idem_key AND item_id = p_item AND state = 'reserved';
        PERFORM pacer_transition(ARRAY[p_item], '{unverified}', 'pending', 'ItemResolvedNotDelivered',
            jsonb_build_object('actor', p_actor, 'reason', p_reason), p_clear_lease => true);
        RETURN QUERY SELECT 'done'::text,
            format('item %s resolved as not delivered: pending again, it will be sent under the same key', p_item),
            'pending'::text;
    END IF;
END
$fn$;

-- The in-doubt list (console, GET /in-doubt) without a scan of every item.
CREATE INDEX items_unverified ON items (updated_at) WHERE status = 'unverified';
