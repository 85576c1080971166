-- What tells a stalled shard from one waiting for its guid (Pacing.stalled), one definition
-- for the three that ask: the reconciler's stall count (quiet_shards.sql), the job page's
-- marks (job_shards.sql) and the Guids page's activity (guids.sql, guid_backlog.sql). Per
-- shard: since when it has not moved (its last progress, its creation, or its job's start when
-- scheduled later), whether its guid is held (paused, or not online), the guid's own
-- overrides, its send windows, the defaults of the sender holding it, and the job's own
-- interval per guid (its `job:<job_id>` row's min_interval_s; 0 without one). A view is
-- expanded into each query; the left joins are all by key, so a query that reads none of
-- their columns does not join them.
CREATE VIEW shard_stall_inputs AS
SELECT s.shard_id, s.job_id, s.guid, s.status, j.status AS job_status,
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
LEFT JOIN guid_limits jl ON jl.guid = 'job:' || s.job_id::text;
