-- A job's shards (one per guid) with their items per status, and what tells a stalled shard
-- from one waiting for its guid (shard_stall_inputs; domain/views.py `stalled`).
SELECT s.shard_id, s.guid, s.sub, s.status, s.paused_reason, s.paused_by, s.total, s.last_progress_at,
       COALESCE((SELECT jsonb_object_agg(sc.status::text, sc.n) FROM shard_status_counts sc
                 WHERE sc.shard_id = s.shard_id AND sc.n <> 0), '{}'::jsonb) AS counts,
       v.quiet_since, v.guid_held, v.limits, v.windows, v.sender_limits, v.job_gap, v.penalty
FROM shards s
JOIN shard_stall_inputs v ON v.shard_id = s.shard_id
WHERE s.job_id = %(job)s::uuid
ORDER BY s.guid, s.sub
