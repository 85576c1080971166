WITH new AS (
    INSERT INTO shards (job_id, guid, total)
    SELECT %(job_id)s, g, t FROM unnest(%(guids)s::text[], %(totals)s::int[]) AS s(g, t)
    RETURNING shard_id, guid, total
), counts AS (
    INSERT INTO shard_status_counts (shard_id, status, n)
    SELECT shard_id, 'pending', total FROM new
)
SELECT guid, shard_id FROM new
