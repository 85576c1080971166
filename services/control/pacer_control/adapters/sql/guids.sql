-- Guids by name: health (hold), lease and limit overrides.
SELECT l.guid, (l.paused_reason IS NOT NULL) AS paused, l.paused_reason, l.paused_by, l.paused_at,
       l.owner, l.epoch, l.since, l.lease_until, l.renew_count, l.takeovers, l.last_send_at,
       (l.owner IS NOT NULL AND l.lease_until < now()) AS expired, gl.limits
FROM guid_leases l
LEFT JOIN guid_limits gl ON gl.guid = l.guid
WHERE (NOT %(paused_only)s OR l.paused_reason IS NOT NULL)
  AND (%(after)s::text IS NULL OR l.guid > %(after)s::text)
ORDER BY l.guid
LIMIT %(limit)s
