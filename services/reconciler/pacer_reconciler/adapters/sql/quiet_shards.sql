-- Open shards of running jobs (guid not paused, online) with no progress for %(stall)s, by
-- guid, with what tells a stall from a guid waiting for its limits (domain/stalls.py): the
-- guid's own overrides and its send windows. At most %(limit)s guids.
SELECT s.guid, array_agg(COALESCE(s.last_progress_at, s.created_at)) AS since, gl.limits, g.windows
FROM shards s
JOIN jobs j ON j.job_id = s.job_id
LEFT JOIN guid_leases g ON g.guid = s.guid
LEFT JOIN guid_states h ON h.guid = s.guid
LEFT JOIN guid_limits gl ON gl.guid = s.guid
WHERE s.status IN ('pending', 'running') AND j.status = 'running' AND g.paused_reason IS NULL
  AND COALESCE(h.state, 'online') = 'online'
  AND COALESCE(s.last_progress_at, s.created_at) < now() - %(stall)s::interval
GROUP BY s.guid, gl.limits, g.windows
LIMIT %(limit)s
