-- Batched confirms: many items' pacer_confirm in one statement and one transaction, each
-- guarded exactly as pacer_confirm guards it.
CREATE OR REPLACE FUNCTION pacer_confirm_many(p_items uuid[], p_epochs bigint[], p_keys text[], p_receipts jsonb[])
RETURNS TABLE (ord bigint, moved boolean)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT t.item, t.epoch, t.key, t.receipt, t.ord
        FROM unnest(p_items, p_epochs, p_keys, p_receipts) WITH ORDINALITY AS t(item, epoch, key, receipt, ord)
        ORDER BY t.item, t.ord
    LOOP
        RETURN QUERY SELECT r.ord, pacer_confirm(r.item, r.epoch, r.key, r.receipt);
    END LOOP;
END
$fn$;
