-- The leases we now hold, with the guid's last send time and send windows for pacing.
-- A LEFT JOIN: this statement's snapshot predates the row that pacer_acquire_guids inserts
-- for a guid never seen before (which has no windows yet), and an inner join would drop it.
SELECT a.guid, a.epoch, a.last_send_at, a.took_over, a.db_now, l.windows
FROM pacer_acquire_guids(%(guids)s::text[], %(owner)s, %(ttl)s::interval) AS a
LEFT JOIN guid_leases l ON l.guid = a.guid
