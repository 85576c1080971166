-- One guid: health, lease and limit overrides; no row if the database has never heard of it.
SELECT g.guid, (l.paused_reason IS NOT NULL) AS paused, l.paused_reason, l.paused_by, l.paused_at,
       l.owner, COALESCE(l.epoch, 0) AS epoch, l.since, l.lease_until, COALESCE(l.renew_count, 0) AS renew_count,
       COALESCE(l.takeovers, 0) AS takeovers, l.last_send_at,
       (l.owner IS NOT NULL AND l.lease_until < now()) AS expired, gl.limits
FROM (SELECT %(guid)s::text AS guid) AS g
LEFT JOIN guid_leases l ON l.guid = g.guid
LEFT JOIN guid_limits gl ON gl.guid = g.guid
WHERE l.guid IS NOT NULL OR gl.guid IS NOT NULL
