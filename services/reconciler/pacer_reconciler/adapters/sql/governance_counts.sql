-- Governance gauges: running jobs, paused jobs by cause, paused guids, guids slowed by a
-- rate-limit penalty (stalled shards: quiet_shards.sql). Each guid count reads a partial index.
SELECT
    (SELECT count(*) FROM jobs WHERE status = 'running') AS jobs_running,
    (SELECT count(*) FROM jobs WHERE status = 'paused' AND paused_reason = 'budget_exhausted') AS jobs_paused_budget,
    (SELECT count(*) FROM jobs WHERE status = 'paused' AND paused_by = 'system:breaker') AS jobs_paused_breaker,
    (SELECT count(*) FROM jobs WHERE status = 'paused' AND paused_by NOT LIKE 'system:%%') AS jobs_paused_operator,
    (SELECT count(*) FROM guid_leases WHERE paused_reason IS NOT NULL) AS guids_paused,
    (SELECT count(*) FROM guid_leases WHERE penalty IS NOT NULL) AS guids_slowed
