-- Guid leases as lock records: holder, since, lease-until, renewals, takeovers, forced
-- releases (by whom, when, which holder was evicted and until when it may not take the guid
-- back). A released lease (no owner) is listed too: its history still matters. Expired leases
-- first, then by guid; or, with %(find)s, the guids from that one on, in guid order (a fleet
-- has more leases than a page: an operator finds the one a stalled guid names).
SELECT guid, owner, epoch, since, lease_until, renew_count, takeovers, last_send_at,
       (owner IS NOT NULL AND lease_until < now()) AS expired,
       forced_releases, released_by, released_at, evicted_owner, evicted_until
FROM guid_leases
WHERE %(find)s::text IS NULL OR guid >= %(find)s::text
ORDER BY CASE WHEN %(find)s::text IS NULL THEN owner IS NOT NULL AND lease_until < now() END DESC, guid
LIMIT %(limit)s
