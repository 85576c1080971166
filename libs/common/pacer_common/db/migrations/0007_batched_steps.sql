-- Batched item steps: many items' begin (or confirm) in one statement and one transaction.
-- A sender gathers the steps its guid workers ask for in the same instant and sends them
-- together; each item is still guarded exactly as pacer_begin_send / pacer_confirm guard it.
-- Items are taken in guid order so that concurrent batches lock guid leases in one order;
-- each result carries its input position (ord, from 1).

CREATE FUNCTION pacer_begin_send_many(p_items uuid[], p_owner text, p_ttl interval, p_keys text[],
                                      p_guids text[], p_to_ids text[])
RETURNS TABLE (ord bigint, outcome text, epoch bigint, attempts integer, holder text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT t.item, t.key, t.guid, t.to_id, t.ord
        FROM unnest(p_items, p_keys, p_guids, p_to_ids) WITH ORDINALITY AS t(item, key, guid, to_id, ord)
        ORDER BY t.guid, t.item, t.ord
    LOOP
        RETURN QUERY SELECT r.ord, b.outcome, b.epoch, b.attempts, b.holder
                     FROM pacer_begin_send(r.item, p_owner, p_ttl, r.key, r.guid, r.to_id) AS b;
    END LOOP;
END
$fn$;

CREATE FUNCTION pacer_confirm_many(p_items uuid[], p_epochs bigint[], p_keys text[], p_receipts jsonb[])
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
