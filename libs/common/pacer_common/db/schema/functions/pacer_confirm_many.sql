-- Batched confirms: many items' pacer_confirm in one statement and one transaction, each
-- guarded exactly as pacer_confirm guards it. Taken in guid order, then item order: the order
-- in which pacer_begin_send_many and the lease renewal lock the same guid_leases and items
-- rows (in item order alone, a confirm batch and a renewal deadlocked under load).
CREATE OR REPLACE FUNCTION pacer_confirm_many(p_items uuid[], p_epochs bigint[], p_keys text[], p_receipts jsonb[])
RETURNS TABLE (ord bigint, moved boolean)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
#variable_conflict use_column
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT t.item, t.epoch, t.key, t.receipt, t.ord
        FROM unnest(p_items, p_epochs, p_keys, p_receipts) WITH ORDINALITY AS t(item, epoch, key, receipt, ord)
        LEFT JOIN items i ON i.item_id = t.item
        ORDER BY i.guid, t.item, t.ord
    LOOP
        RETURN QUERY SELECT r.ord, pacer_confirm(r.item, r.epoch, r.key, r.receipt);
    END LOOP;
END
$fn$;
