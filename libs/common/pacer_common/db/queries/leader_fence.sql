-- Inside a leader-only write's transaction: the lease is still ours at this epoch and not
-- expired. FOR SHARE makes a takeover (an UPDATE of the row) wait until this transaction
-- ends, so the write commits under a lease that was valid all along, or not at all.
SELECT 1 FROM leader_leases
WHERE name = %(name)s AND epoch = %(epoch)s::bigint AND expires_at > clock_timestamp()
FOR SHARE
