-- The leases we now hold, with the guid's last send time, send windows and rate-limit penalty
-- for pacing, as the function read them once each row was locked.
SELECT a.guid, a.epoch, a.last_send_at, a.took_over, a.db_now, a.windows, a.penalty
FROM pacer_acquire_guids(%(guids)s::text[], %(owner)s, %(ttl)s::interval, %(in_flight)s::interval) AS a
