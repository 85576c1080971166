-- Give the lease up at once (a clean stop), so a standby need not wait for the TTL.
UPDATE leader_leases SET expires_at = clock_timestamp()
WHERE name = %(name)s AND holder = %(holder)s AND epoch = %(epoch)s::bigint
