-- Open shards of running jobs (guid not paused, online) with no progress for %(stall)s (since
-- their last progress, their creation, or their job's start when it is scheduled later), by
-- guid, with what tells a stall from a guid waiting for its limits (domain/stalls.py): the
-- guid's own overrides, its send windows, the defaults of the sender holding it, and each
-- shard's job's own interval per guid (a `job:<job_id>` row's min_interval_s). Every such
-- guid, read through a cursor a page at a time.
SELECT s.guid,
       array_agg(greatest(COALESCE(s.last_progress_at, s.created_at), j.not_before) ORDER BY s.shard_id) AS since,
       array_agg(CASE WHEN jsonb_typeof(jl.limits -> 'min_interval_s') = 'number'
                      THEN (jl.limits ->> 'min_interval_s')::float8 ELSE 0 END ORDER BY s.shard_id) AS job_gaps,
       gl.limits, g.windows, sl.limits AS sender_limits
FROM shards s
JOIN jobs j ON j.job_id = s.job_id
LEFT JOIN guid_leases g ON g.guid = s.guid
LEFT JOIN guid_states h ON h.guid = s.guid
LEFT JOIN guid_limits gl ON gl.guid = s.guid
LEFT JOIN sender_limits sl ON sl.owner = g.owner
LEFT JOIN guid_limits jl ON jl.guid = 'job:' || s.job_id::text
WHERE s.status IN ('pending', 'running') AND j.status = 'running' AND g.paused_reason IS NULL
  AND COALESCE(h.state, 'online') = 'online'
  AND greatest(COALESCE(s.last_progress_at, s.created_at), j.not_before) < now() - %(stall)s::interval
GROUP BY s.guid, gl.limits, g.windows, sl.limits
