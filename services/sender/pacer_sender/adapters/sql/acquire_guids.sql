-- The leases we now hold, with the guid's last send time, send windows and rate-limit penalty
-- for pacing.
-- LEFT JOIN: a lease row the function has just inserted is not in this statement's
-- snapshot, and a guid never seen before has no windows yet.
SELECT a.guid, a.epoch, a.last_send_at, a.took_over, a.db_now, COALESCE(l.windows, '{}'::jsonb) AS windows,
       l.penalty
FROM pacer_acquire_guids(%(guids)s::text[], %(owner)s, %(ttl)s::interval, %(in_flight)s::interval) AS a
LEFT JOIN guid_leases l ON l.guid = a.guid
