-- Take the lease if it is free or expired, or renew it if this holder still has it at this
-- epoch. A takeover bumps the epoch (the fencing token). Only the database clock decides.
INSERT INTO leader_leases AS l (name, holder, epoch, expires_at)
VALUES (%(name)s, %(holder)s, 1, clock_timestamp() + make_interval(secs => %(ttl)s::float8))
ON CONFLICT (name) DO UPDATE
SET epoch = CASE WHEN l.holder = EXCLUDED.holder AND l.epoch = %(epoch)s::bigint THEN l.epoch ELSE l.epoch + 1 END,
    taken_at = CASE WHEN l.holder = EXCLUDED.holder AND l.epoch = %(epoch)s::bigint THEN l.taken_at ELSE now() END,
    holder = EXCLUDED.holder,
    expires_at = EXCLUDED.expires_at
WHERE (l.holder = EXCLUDED.holder AND l.epoch = %(epoch)s::bigint) OR l.expires_at <= clock_timestamp()
RETURNING l.epoch
