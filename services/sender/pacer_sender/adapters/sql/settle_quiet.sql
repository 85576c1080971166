-- The quiet a gateway asked of the guid with the rate limit the settle before it records (a
-- 429's Retry-After: the seconds of it left), in the settle's own transaction: the quiet is on
-- the guid's lease row exactly when the rate limit is on the item, so a sender killed right
-- after cannot leave the rate limit recorded and the quiet lost (its successor reads the row at
-- its take). A quiet already there that ends later is kept. The epoch is not asked: the quiet
-- is the gateway's, whoever holds the guid.
UPDATE guid_leases SET gateway_quiet_until = greatest(gateway_quiet_until,
                                                      now() + make_interval(secs => %(seconds)s::float8))
WHERE guid = %(guid)s
