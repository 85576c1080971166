-- Guids by name: health (hold), queued (items queued for it) and how long the oldest has
-- waited, lease and limit overrides.
SELECT l.guid, (l.paused_reason IS NOT NULL) AS paused, l.paused_reason, l.paused_by, l.paused_at,
       l.owner, l.epoch, l.since, l.lease_until, l.renew_count, l.takeovers, l.last_send_at,
       (l.owner IS NOT NULL AND l.lease_until < now()) AS expired, gl.limits,
       q.queued, q.oldest_waiting
FROM guid_leases l
LEFT JOIN guid_limits gl ON gl.guid = l.guid
LEFT JOIN LATERAL (
    SELECT count(*) AS queued, min(i.created_at) AS oldest_waiting
    FROM items i WHERE i.guid = l.guid AND i.status IN ('pending', 'waiting_retry')
) AS q ON true
WHERE (NOT %(paused_only)s OR l.paused_reason IS NOT NULL)
  AND (%(after)s::text IS NULL OR l.guid > %(after)s::text)
ORDER BY l.guid
LIMIT %(limit)s
