-- pause / resume one shard, only if it belongs to the job named (no row otherwise). Audited.
SELECT r.outcome, r.message, r.status
FROM shards s
CROSS JOIN LATERAL pacer_shard_action(s.shard_id, %(action)s::text, %(actor)s::text, %(reason)s::text) AS r
WHERE s.shard_id = %(shard)s::bigint AND s.job_id = %(job)s::uuid
