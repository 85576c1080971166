-- One guid: health (pause and lifecycle state), lease and limit overrides (and the defaults
-- of the sender holding it); no row if the database has never heard of it.
SELECT g.guid, (l.paused_reason IS NOT NULL) AS paused, l.paused_reason, l.paused_by, l.paused_at,
       COALESCE(h.state::text, 'online') AS state, h.since AS state_since, h.source AS state_source,
       h.reason AS state_reason, (l.paused_reason IS NOT NULL OR COALESCE(h.state, 'online') <> 'online') AS held,
       l.owner, COALESCE(l.epoch, 0) AS epoch, l.since, l.lease_until, COALESCE(l.renew_count, 0) AS renew_count,
       COALESCE(l.takeovers, 0) AS takeovers, l.last_send_at,
       (l.owner IS NOT NULL AND l.lease_until < now()) AS expired, gl.limits, l.windows, sl.limits AS sender_limits, l.penalty,
       l.gateway_quiet_until
FROM (SELECT %(guid)s::text AS guid) AS g
LEFT JOIN guid_leases l ON l.guid = g.guid
LEFT JOIN guid_states h ON h.guid = g.guid
LEFT JOIN guid_limits gl ON gl.guid = g.guid
LEFT JOIN sender_limits sl ON sl.owner = l.owner
WHERE l.guid IS NOT NULL OR gl.guid IS NOT NULL OR h.guid IS NOT NULL
