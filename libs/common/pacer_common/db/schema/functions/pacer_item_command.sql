-- An item as its item command (pacer_common.domain.commands.ItemCommand): the one list of
-- the columns a command carries. Every query that reads commands back from items selects
-- ``c.*`` from ``items i CROSS JOIN LATERAL pacer_item_command(i) c``; a plain SQL function
-- that is not STRICT nor VOLATILE is inlined by the planner, so this costs nothing per row.
-- The job's columns are read by scalar subqueries, one primary-key probe each, never a join
-- the planner could turn into a scan of every job.
-- Its columns grow with ItemCommand, and a function's result type cannot be replaced in place:
-- nothing else depends on it, so it is dropped and created again.
DROP FUNCTION IF EXISTS pacer_item_command(items);
CREATE OR REPLACE FUNCTION pacer_item_command(i items)
RETURNS TABLE (item_id text, job_id text, shard_id bigint, guid text, to_id text, content text,
               idem_key text, priority smallint, kind text, expire_at timestamptz, not_before timestamptz,
               created_at timestamptz, traceparent text, tenant text)
LANGUAGE sql STABLE ROWS 1 AS $fn$
    SELECT i.item_id::text, i.job_id::text, i.shard_id, i.guid, i.to_id,
           -- NULL on the item: its job's common content (read only then)
           COALESCE(i.content, (SELECT j.item_content FROM jobs j WHERE j.job_id = i.job_id)),
           i.idem_key, i.priority, i.kind, i.expire_at, i.not_before, i.created_at, i.traceparent,
           (SELECT j.tenant FROM jobs j WHERE j.job_id = i.job_id);  -- an item's tenant is its job's
$fn$;
