-- A page's items; returns those added, with their shards (page_counts.sql and
-- page_totals.sql then count them). A (guid, to_id) the job already has is skipped: each
-- items partition has a unique index on (job_id, guid, to_id) for requery items, and all of
-- a job's items are in one partition (their ids carry the job's creation time). The conflict
-- names no index: a partition's own index cannot be named through the partitioned table.
-- An item whose content is its job's common one stores none: compared with the text the job
-- stored (jobs.item_content), not one computed again, which a planner of another version
-- might compute differently.
INSERT INTO items (item_id, job_id, shard_id, guid, to_id, content, idem_key, priority, kind,
                   expire_at, not_before, target_page, traceparent)
SELECT i, %(job_id)s, s, g, t, NULLIF(c, (SELECT j.item_content FROM jobs j WHERE j.job_id = %(job_id)s)), k,
       %(priority)s, %(kind)s, %(expire_at)s, %(not_before)s, %(page_no)s, %(traceparent)s
FROM unnest(%(item_ids)s::uuid[], %(shard_ids)s::bigint[], %(guids)s::text[], %(to_ids)s::text[],
            %(contents)s::text[], %(keys)s::text[]) AS x(i, s, g, t, c, k)
ON CONFLICT DO NOTHING
RETURNING item_id::text AS item_id, shard_id
