INSERT INTO shard_status_counts (shard_id, status, n)
SELECT s, st, d FROM unnest(%(shards)s::bigint[], %(statuses)s::item_status[], %(deltas)s::bigint[]) AS u(s, st, d)
ON CONFLICT (shard_id, status) DO UPDATE SET n = shard_status_counts.n + EXCLUDED.n
