-- One guid's backlog: items by lane and status (those not finished; a pending item is
-- `held`, `scheduled` or `ready`), how many are ready and since when the first of them
-- has waited, and the time to drain its queue at its send rate this hour (NULL when it has
-- not sent this hour), and the shortest of the ready items' jobs' own intervals per guid
-- (`job_gap`, shard_stall_inputs). Reads the guid's unfinished rows (items_guid_queued,
-- items_guid_in_flight), and each of their shards' row and its job's once, by key.
WITH per_shard AS (
    SELECT shard_id, CASE WHEN priority <= 1 THEN 'online' ELSE 'batch' END AS lane,
           CASE WHEN status = 'pending' AND held THEN 'held'
                WHEN status = 'pending' AND not_before > now() THEN 'scheduled'
                WHEN status = 'pending' THEN 'ready'
                ELSE status::text END AS state,
           count(*) AS n,
           min(COALESCE(not_before, created_at)) FILTER (
               WHERE status = 'pending' AND NOT held AND COALESCE(not_before, created_at) <= now()) AS oldest_ready
    FROM items
    WHERE guid = %(guid)s AND status IN ('pending', 'waiting_retry', 'claimed', 'submitted', 'recovery_pending')
    GROUP BY 1, 2, 3
), counts AS (
    -- a pending item of a job not running or a shard paused is held, whether or not a sender
    -- has met it yet (pacer_hold_reason, the rule pacer_begin_send applies)
    SELECT p.lane, CASE WHEN p.state IN ('ready', 'scheduled') AND NOT r.runs THEN 'held' ELSE p.state END AS state,
           sum(p.n)::bigint AS n, min(p.oldest_ready) FILTER (WHERE r.runs) AS oldest_ready,
           min(r.job_gap) FILTER (WHERE r.runs AND p.state = 'ready') AS job_gap
    FROM per_shard p
    CROSS JOIN LATERAL (
        SELECT (SELECT pacer_hold_reason(j.status::text, j.paused_reason, s.status::text, s.paused_reason, NULL)
                       IS NULL
                FROM shards s JOIN jobs j ON j.job_id = s.job_id WHERE s.shard_id = p.shard_id) AS runs,
               (SELECT v.job_gap FROM shard_stall_inputs v WHERE v.shard_id = p.shard_id) AS job_gap
    ) r
    GROUP BY 1, 2
), rate AS (
    SELECT pacer_hour_rate(windows) AS per_s FROM guid_leases WHERE guid = %(guid)s
)
SELECT COALESCE((SELECT jsonb_object_agg(lane, states) FROM (
            SELECT lane, jsonb_object_agg(state, n) AS states FROM counts GROUP BY lane) l), '{}') AS by_lane,
       COALESCE((SELECT sum(n) FROM counts WHERE state IN ('ready', 'scheduled')), 0)::bigint AS queued,
       COALESCE(extract(epoch FROM now() - (SELECT min(oldest_ready) FROM counts))::float8, 0) AS oldest_wait_s,
       (SELECT sum(n) FROM counts WHERE state IN ('ready', 'scheduled')) / NULLIF((SELECT per_s FROM rate), 0)
           AS drain_s,
       (SELECT per_s FROM rate) AS sends_per_s,
       COALESCE((SELECT sum(n) FROM counts WHERE state = 'ready'), 0)::bigint AS ready,
       (SELECT min(oldest_ready) FROM counts) AS oldest_ready,
       COALESCE((SELECT min(job_gap) FROM counts), 0)::float8 AS job_gap
