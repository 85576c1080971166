-- Guids by backlog: their pending work by lane — ready now, scheduled — the longest a ready
-- item has waited, and the time to drain at the guid's send rate this hour. Held work is left
-- out: items a sender has marked held, those of a job not running or a shard paused, and a
-- guid paused or not online (pacer_hold_reason and pacer_guid_hold, the rules
-- pacer_begin_send applies; each shard's rows and each guid's read once), whether or not a
-- sender has met its items yet.
-- Sorted by %(sort)s ('backlog': most queued first; 'wait': longest wait first), %(limit)s
-- rows. Reads every pending row once (items_guid_ready); for operators and a metrics refresh
-- every so often, not for a hot path.
WITH per_shard AS (
    SELECT guid, shard_id,
           count(*) FILTER (WHERE ready AND priority <= 1) AS online_ready,
           count(*) FILTER (WHERE ready AND priority > 1) AS batch_ready,
           count(*) FILTER (WHERE NOT ready) AS scheduled,
           min(ready_at) FILTER (WHERE ready) AS oldest_ready
    FROM (SELECT guid, shard_id, priority, COALESCE(not_before, created_at) AS ready_at,
                 COALESCE(not_before, created_at) <= now() AS ready
          FROM items WHERE status = 'pending' AND NOT held) q
    GROUP BY guid, shard_id
), per_guid AS (
    SELECT p.guid, sum(p.online_ready)::bigint AS online_ready, sum(p.batch_ready)::bigint AS batch_ready,
           sum(p.scheduled)::bigint AS scheduled,
           extract(epoch FROM now() - min(p.oldest_ready))::float8 AS oldest_wait_s
    FROM per_shard p
    JOIN shards s ON s.shard_id = p.shard_id
    JOIN jobs j ON j.job_id = s.job_id
    WHERE pacer_hold_reason(j.status::text, j.paused_reason, s.status::text, s.paused_reason, NULL) IS NULL
    GROUP BY p.guid
)
SELECT p.guid, p.online_ready, p.batch_ready, p.scheduled, p.online_ready + p.batch_ready + p.scheduled AS queued,
       COALESCE(p.oldest_wait_s, 0) AS oldest_wait_s,
       (p.online_ready + p.batch_ready + p.scheduled) / NULLIF(r.per_s, 0) AS drain_s
FROM per_guid p
LEFT JOIN guid_leases l ON l.guid = p.guid
LEFT JOIN guid_states h ON h.guid = p.guid
CROSS JOIN LATERAL (SELECT pacer_hour_rate(l.windows) AS per_s) r
WHERE pacer_guid_hold(l.paused_reason, h.state::text, h.reason) IS NULL
ORDER BY CASE WHEN %(sort)s = 'wait' THEN COALESCE(p.oldest_wait_s, 0)
              ELSE (p.online_ready + p.batch_ready + p.scheduled)::float8 END DESC, p.guid
LIMIT %(limit)s
