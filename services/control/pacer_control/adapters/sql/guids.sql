-- Guids by name: health (pause and lifecycle state; `held` when either stops it), queued
-- (items queued for it) and how long the oldest has waited, lease and limit overrides. A
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
       (l.owner IS NOT NULL AND l.lease_until < now()) AS expired, gl.limits,
       q.queued, q.oldest_waiting
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
LEFT JOIN LATERAL (
    SELECT count(*) AS queued, min(i.created_at) AS oldest_waiting
    FROM items i WHERE i.guid = k.guid AND i.status IN ('pending', 'waiting_retry')
) AS q ON true
WHERE (NOT %(paused_only)s OR l.paused_reason IS NOT NULL OR COALESCE(h.state, 'online') <> 'online')
  AND (%(state)s::text IS NULL OR COALESCE(h.state::text, 'online') = %(state)s::text)
ORDER BY k.guid
LIMIT %(limit)s
