-- The leases we now hold, with the guid's last send time, send windows, rate-limit penalty and
-- the seconds left of a quiet a gateway asked of it, for pacing, as the function read them once
-- each row was locked.
SELECT a.guid, a.epoch, a.last_send_at, a.took_over, a.db_now, a.windows, a.penalty, a.quiet_s
FROM pacer_acquire_guids(%(guids)s::text[], %(owner)s, %(ttl)s::interval, %(in_flight)s::interval) AS a
