-- A quiet a gateway asked of a guid when the verifier looked one of its sends up (a rate
-- limit's Retry-After): kept on the guid's lease row, where its senders read it (at a take, and
-- at each renewal of a lease they hold) and make no call of the guid until it ends. A quiet
-- already there that ends later is kept: the row holds the latest end any caller was given.
-- The epoch is not asked: the quiet is the gateway's, whoever holds the guid.
INSERT INTO guid_leases AS g (guid, gateway_quiet_until)
VALUES (%(guid)s, now() + make_interval(secs => %(seconds)s::float8))
ON CONFLICT (guid) DO UPDATE SET gateway_quiet_until = greatest(g.gateway_quiet_until, EXCLUDED.gateway_quiet_until)
