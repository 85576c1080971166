-- Guids by name: health (pause and lifecycle state; `held` when either stops it), queued
-- (items queued for it) and how long the oldest has waited, lease and limit overrides; and
-- of the queued, those ready to send now (pending, not held, due, their job running and
-- their shard not paused: pacer_hold_reason, the rule pacer_begin_send applies) and when the
-- first of them became ready, and the shortest of their jobs' own intervals per guid
-- (`job_gap`, shard_stall_inputs). The guid's queued rows are counted per shard (items_guid_queued),
-- then each shard's row and its job's are read by key, once per shard (a subquery, so the
-- plan cannot turn into a scan of every shard for every guid listed; the same subquery in a
-- SQL function made the first page 3.5 times as slow, docs/performance.md). A
-- guid is listed once it has held a lease or had a lifecycle state. ``paused_only``: the
-- held ones; ``state``: only guids in that lifecycle state; ``after`` (the previous page's
-- last guid) or ``start`` (a guid to list from, itself included): where the page begins.
-- A guid is held when its lease row is paused or its state row is not online, so with
-- ``paused_only`` each branch of the union keeps only those rows (the partial indexes
-- guid_leases_paused and guid_states_held) and the list does not read every guid; the outer
-- condition still decides.
SELECT k.guid, (l.paused_reason IS NOT NULL) AS paused, l.paused_reason, l.paused_by, l.paused_at,
       COALESCE(h.state::text, 'online') AS state, h.since AS state_since, h.source AS state_source,
       h.reason AS state_reason, (l.paused_reason IS NOT NULL OR COALESCE(h.state, 'online') <> 'online') AS held,
       l.owner, l.epoch, l.since, l.lease_until, l.renew_count, l.takeovers, l.last_send_at,
       (l.owner IS NOT NULL AND l.lease_until < now()) AS expired, gl.limits, l.windows, sl.limits AS sender_limits, l.penalty,
       l.gateway_quiet_until,
       q.queued, q.oldest_waiting, q.ready, q.oldest_ready, q.job_gap
FROM (SELECT guid FROM guid_leases
      WHERE (%(after)s::text IS NULL OR guid > %(after)s::text) AND (%(start)s::text IS NULL OR guid >= %(start)s::text)
        AND (NOT %(paused_only)s OR paused_reason IS NOT NULL)
      UNION
      SELECT guid FROM guid_states
      WHERE (%(after)s::text IS NULL OR guid > %(after)s::text) AND (%(start)s::text IS NULL OR guid >= %(start)s::text)
        AND (NOT %(paused_only)s OR state <> 'online')
     ) AS k
LEFT JOIN guid_leases l ON l.guid = k.guid
LEFT JOIN guid_states h ON h.guid = k.guid
LEFT JOIN guid_limits gl ON gl.guid = k.guid
LEFT JOIN sender_limits sl ON sl.owner = l.owner
LEFT JOIN LATERAL (
    SELECT COALESCE(sum(c.n), 0)::bigint AS queued, min(c.oldest) AS oldest_waiting,
           COALESCE(sum(c.ready) FILTER (WHERE c.runs), 0)::bigint AS ready,
           min(c.oldest_ready) FILTER (WHERE c.runs) AS oldest_ready,
           COALESCE(min(c.job_gap) FILTER (WHERE c.runs AND c.ready > 0), 0)::float8 AS job_gap
    FROM (
        SELECT n.n, n.oldest, n.ready, n.oldest_ready,
               (SELECT pacer_hold_reason(j.status::text, j.paused_reason, s.status::text, s.paused_reason, NULL)
                       IS NULL
                FROM shards s JOIN jobs j ON j.job_id = s.job_id WHERE s.shard_id = n.shard_id) AS runs,
               (SELECT v.job_gap FROM shard_stall_inputs v WHERE v.shard_id = n.shard_id) AS job_gap
        FROM (SELECT i.shard_id, count(*) AS n, min(i.created_at) AS oldest,
                     count(*) FILTER (WHERE i.status = 'pending' AND NOT i.held
                                        AND COALESCE(i.not_before, i.created_at) <= now()) AS ready,
                     min(COALESCE(i.not_before, i.created_at)) FILTER (
                         WHERE i.status = 'pending' AND NOT i.held AND COALESCE(i.not_before, i.created_at) <= now())
                         AS oldest_ready
              FROM items i WHERE i.guid = k.guid AND i.status IN ('pending', 'waiting_retry')
              GROUP BY i.shard_id) AS n
    ) AS c
) AS q ON true
WHERE (NOT %(paused_only)s OR l.paused_reason IS NOT NULL OR COALESCE(h.state, 'online') <> 'online')
  AND (%(state)s::text IS NULL OR COALESCE(h.state::text, 'online') = %(state)s::text)
ORDER BY k.guid
LIMIT %(limit)s
