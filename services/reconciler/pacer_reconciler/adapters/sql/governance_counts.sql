-- Governance gauges: running jobs, paused jobs by cause, paused guids, stalled shards (open, job running,
-- guid not paused and online, no progress for %(stall)s).
SELECT
    (SELECT count(*) FROM jobs WHERE status = 'running') AS jobs_running,
    (SELECT count(*) FROM jobs WHERE status = 'paused' AND paused_reason = 'budget_exhausted') AS jobs_paused_budget,
    (SELECT count(*) FROM jobs WHERE status = 'paused' AND paused_by = 'system:breaker') AS jobs_paused_breaker,
    (SELECT count(*) FROM jobs WHERE status = 'paused' AND paused_by NOT LIKE 'system:%%') AS jobs_paused_operator,
    (SELECT count(*) FROM guid_leases WHERE paused_reason IS NOT NULL) AS guids_paused,
    (SELECT count(*)
     FROM shards s JOIN jobs j ON j.job_id = s.job_id
     LEFT JOIN guid_leases g ON g.guid = s.guid
     LEFT JOIN guid_states h ON h.guid = s.guid
     WHERE s.status IN ('pending', 'running') AND j.status = 'running' AND g.paused_reason IS NULL
       AND COALESCE(h.state, 'online') = 'online'
       AND COALESCE(s.last_progress_at, s.created_at) < now() - %(stall)s::interval) AS stalled_shards
