-- Batched begins: many items' pacer_begin_send in one statement and one transaction; each
-- result carries its input position (ord, from 1). Items are begun in guid order, so that
-- concurrent batches lock guid leases in one order. A budgeted send counts on its job's row,
-- which stays locked until the batch commits, so two senders' batches with interleaved guids
-- of two budgeted jobs would take the job rows in opposite orders and deadlock: the batch
-- therefore locks its budgeted jobs first, in job id order, before any guid lease or item.
CREATE OR REPLACE FUNCTION pacer_begin_send_many(p_items uuid[], p_owner text, p_ttl interval, p_keys text[],
                                                 p_guids text[], p_to_ids text[])
RETURNS TABLE (ord bigint, outcome text, epoch bigint, attempts integer, holder text)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
#variable_conflict use_column
DECLARE
    r record;
BEGIN
    PERFORM 1 FROM jobs j
    WHERE j.job_id IN (SELECT i.job_id FROM items i WHERE i.item_id = ANY(p_items))
      AND j.budget_max_sends IS NOT NULL
    ORDER BY j.job_id
    FOR NO KEY UPDATE;
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
