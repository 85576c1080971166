DROP FUNCTION IF EXISTS pacer_confirm(uuid, bigint, text, jsonb);  -- one item at a time: replaced by this
-- The gateway accepted: submitted → confirmed and the idempotency key marked sent,
-- together, for a batch of items in one transaction, each guarded by its own lease epoch,
-- as a few set-based statements. The guid's last answer time is what a successor paces from
-- (pacer_acquire_guids). The guid leases are locked first, in guid order:
-- the order in which pacer_begin_send_many, the lease renewal and pacer_acquire_guids lock
-- them (taking them item by item, a confirm batch and a renewal deadlocked under load).
CREATE OR REPLACE FUNCTION pacer_confirm_many(p_items uuid[], p_epochs bigint[], p_keys text[], p_receipts jsonb[])
RETURNS TABLE (ord bigint, moved boolean)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
#variable_conflict use_column
DECLARE
    done uuid[];
BEGIN
    -- This call's commit is synchronous whatever the default (pacer_common.db.durable).
    PERFORM set_config('synchronous_commit', 'on', true);
    PERFORM 1 FROM guid_leases l
    WHERE l.guid = ANY(ARRAY(SELECT i.guid FROM items i WHERE i.item_id = ANY(p_items)))
    ORDER BY l.guid
    FOR NO KEY UPDATE;
    SELECT array_agg(c.item_id) INTO done
    FROM pacer_transition(p_items, '{submitted}', 'confirmed', 'ItemConfirmed', p_clear_lease => true,
        p_epochs => p_epochs,
        p_payloads => ARRAY(SELECT jsonb_build_object('receipt', u.r)
                            FROM unnest(p_receipts) WITH ORDINALITY AS u(r, n) ORDER BY u.n)) AS c;
    -- By both columns of the ledger's key (idem_key first): with item_id alone, a plan made
    -- before the statistics knew the ledger read the whole key index for each batch. An
    -- item's key and receipt are found by its position in p_items, not by a join with the
    -- list: planned for the ten-odd rows a generic plan expects, the join compared every
    -- ledger row with every entry (250,000 pairs for a batch of 500).
    UPDATE send_ledger l SET state = 'sent', receipt = p_receipts[array_position(p_items, l.item_id)],
                             sent_at = now()
    WHERE l.idem_key = ANY(p_keys) AND l.item_id = ANY(done)
      AND l.idem_key = p_keys[array_position(p_items, l.item_id)];
    UPDATE guid_leases l SET last_answer_at = clock_timestamp()
    WHERE l.guid = ANY(ARRAY(SELECT i.guid FROM items i WHERE i.item_id = ANY(done)));
    RETURN QUERY
    SELECT t.ord, t.item = ANY(COALESCE(done, '{}'))
    FROM unnest(p_items) WITH ORDINALITY AS t(item, ord);
END
$fn$;
