-- Governance gauges: running jobs, paused jobs by cause, paused guids, guids slowed by a
-- rate-limit penalty while a live lease holder paces them at it, as the Guids page and the stall
-- count see them (a row keeps its last penalty after its holder is gone: the next owner reads
-- it); guids keeping a quiet a gateway asked of them (a Retry-After), whoever holds them (their
-- in-doubt items: in_doubt_quiet.sql). Stalled shards: quiet_shards.sql. Each guid count reads
-- a partial index.
SELECT
    (SELECT count(*) FROM jobs WHERE status = 'running') AS jobs_running,
    (SELECT count(*) FROM jobs WHERE status = 'paused' AND paused_by = 'system:budget') AS jobs_paused_budget,
    (SELECT count(*) FROM jobs WHERE status = 'paused' AND paused_by = 'system:breaker') AS jobs_paused_breaker,
    (SELECT count(*) FROM jobs WHERE status = 'paused' AND paused_by NOT LIKE 'system:%%') AS jobs_paused_operator,
    (SELECT count(*) FROM guid_leases WHERE paused_reason IS NOT NULL) AS guids_paused,
    (SELECT count(*) FROM guid_leases
     WHERE penalty IS NOT NULL AND owner IS NOT NULL AND lease_until > now()) AS guids_slowed,
    (SELECT count(*) FROM guid_leases WHERE gateway_quiet_until > now()) AS guids_quiet
