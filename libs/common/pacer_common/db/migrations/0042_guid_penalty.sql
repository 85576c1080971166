-- A guid's rate-limit penalty: how many times its configured interval it is paced at after
-- the gateway rate-limited it (or left a send unanswered), NULL once clean sends have brought
-- it back to 1. The sender holding the guid writes it, at most once per renewal period and
-- under the lease epoch it holds (penalize_guids.sql); a new owner resumes the guid at it, and
-- the stall checks stretch the guid's longest gap by it while a sender holds the guid (a guid
-- nobody holds is paced by nobody: its shards are stalled by its own gap).
ALTER TABLE guid_leases ADD COLUMN IF NOT EXISTS penalty float8
    CONSTRAINT guid_leases_penalty_above_one CHECK (penalty > 1);

CREATE OR REPLACE VIEW shard_stall_inputs AS
SELECT s.shard_id, s.job_id, s.guid, s.status, j.status AS job_status,
       greatest(COALESCE(s.last_progress_at, s.created_at), j.not_before) AS quiet_since,
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
