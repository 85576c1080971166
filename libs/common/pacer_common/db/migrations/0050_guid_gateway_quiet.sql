-- The quiet a gateway asked of a guid with a rate limit (its Retry-After): no call of the
-- guid, online or batch, until then. The sender holding the guid writes it with the guid's
-- rate-limit penalty, at once and under the lease epoch it holds (penalize_guids.sql), as
-- Postgres' own clock plus the quiet left; a new owner (a takeover after a crash, a
-- rebalance) resumes the guid's pacing at it (pacer_acquire_guids), so the quiet holds across
-- senders, not only in the memory of the one that was answered. NULL: none asked, or one that
-- a later write found over.
ALTER TABLE guid_leases ADD COLUMN IF NOT EXISTS gateway_quiet_until timestamptz;

-- A shard whose guid keeps such a quiet is waiting for it, not stalled: it has been quiet
-- since the quiet ends, at the earliest (greatest() passes over a NULL).
CREATE OR REPLACE VIEW shard_stall_inputs AS
SELECT s.shard_id, s.job_id, s.guid, s.status, j.status AS job_status,
       greatest(COALESCE(s.last_progress_at, s.created_at), j.not_before, g.gateway_quiet_until) AS quiet_since,
       (g.paused_reason IS NOT NULL OR COALESCE(h.state, 'online') <> 'online') AS guid_held,
       gl.limits, g.windows, sl.limits AS sender_limits,
       CASE WHEN jsonb_typeof(jl.limits -> 'min_interval_s') = 'number'
            THEN (jl.limits ->> 'min_interval_s')::float8 ELSE 0 END AS job_gap,
       CASE WHEN g.owner IS NOT NULL AND g.lease_until > now() THEN COALESCE(g.penalty, 1) ELSE 1 END AS penalty
FROM shards s
JOIN jobs j ON j.job_id = s.job_id
LEFT JOIN guid_leases g ON g.guid = s.guid
LEFT JOIN guid_states h ON h.guid = s.guid
LEFT JOIN guid_limits gl ON gl.guid = s.guid
LEFT JOIN sender_limits sl ON sl.owner = g.owner
LEFT JOIN guid_limits jl ON jl.guid = 'job:' || s.job_id::text;
