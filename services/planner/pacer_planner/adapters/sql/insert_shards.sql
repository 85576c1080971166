-- New shards with their totals and the pending count the reconciler's projection starts from.
WITH new AS (
    INSERT INTO shards (job_id, guid, sub, subs, total)
    SELECT %(job_id)s, g, s, n, t
    FROM unnest(%(guids)s::text[], %(subs)s::int[], %(counts)s::int[], %(totals)s::int[]) AS x(g, s, n, t)
    RETURNING shard_id, guid, sub, total
), counts AS (
    INSERT INTO shard_status_counts (shard_id, status, n)
    SELECT shard_id, 'pending', total FROM new
)
SELECT guid, sub, shard_id FROM new
