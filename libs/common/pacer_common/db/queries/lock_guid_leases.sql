-- Guid leases as lock records: holder, since, lease-until, renewals, takeovers. A released
-- lease (no owner) is listed too: its takeovers and last send time still matter.
SELECT guid, owner, epoch, since, lease_until, renew_count, takeovers, last_send_at,
       (owner IS NOT NULL AND lease_until < now()) AS expired
FROM guid_leases
ORDER BY expired DESC, guid
LIMIT %(limit)s
