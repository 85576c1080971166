-- A job's shards (one per guid) with their items per status, and what tells a stalled shard
-- from one waiting for its guid (domain/views.py `stalled`, as the reconciler's
-- quiet_shards.sql): since when it has not moved (its last progress, its creation, or its
-- job's start when scheduled later), whether its guid is held (paused, or not online), the
-- guid's own overrides, its send windows, the defaults of the sender holding it, and the job's
-- own interval per guid (its `job:<job_id>` row's min_interval_s).
SELECT s.shard_id, s.guid, s.sub, s.status, s.paused_reason, s.paused_by, s.total, s.last_progress_at,
       COALESCE((SELECT jsonb_object_agg(sc.status::text, sc.n) FROM shard_status_counts sc
                 WHERE sc.shard_id = s.shard_id AND sc.n <> 0), '{}'::jsonb) AS counts,
       greatest(COALESCE(s.last_progress_at, s.created_at), j.not_before) AS quiet_since,
       (g.paused_reason IS NOT NULL OR COALESCE(h.state, 'online') <> 'online') AS guid_held,
       gl.limits, g.windows, sl.limits AS sender_limits,
       CASE WHEN jsonb_typeof(jl.limits -> 'min_interval_s') = 'number'
            THEN (jl.limits ->> 'min_interval_s')::float8 ELSE 0 END AS job_gap
FROM shards s
JOIN jobs j ON j.job_id = s.job_id
LEFT JOIN guid_leases g ON g.guid = s.guid
LEFT JOIN guid_states h ON h.guid = s.guid
LEFT JOIN guid_limits gl ON gl.guid = s.guid
LEFT JOIN sender_limits sl ON sl.owner = g.owner
LEFT JOIN guid_limits jl ON jl.guid = 'job:' || s.job_id::text
WHERE s.job_id = %(job)s::uuid
ORDER BY s.guid, s.sub
