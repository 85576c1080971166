-- The holders of guid leases that have not run out, one row each: `pacer after-restore` refuses
-- while a sender may still send on the restored database. A lease restored with the backup, or
-- left by a sender that was killed, looks the same until it runs out (at most the sender's lease
-- TTL after its last renewal), hence how long until the last one does.
SELECT owner, count(*) AS guids, ceil(extract(epoch FROM max(lease_until) - now()))::int AS seconds_left
FROM guid_leases
WHERE owner IS NOT NULL AND lease_until > now()
GROUP BY owner
ORDER BY seconds_left DESC, owner
