CREATE OR REPLACE FUNCTION pacer_resolve_unverified(p_item uuid, p_delivered boolean, p_actor text, p_reason text)
RETURNS TABLE (outcome text, message text, status text)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
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
