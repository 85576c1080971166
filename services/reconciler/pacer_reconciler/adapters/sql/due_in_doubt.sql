-- In-doubt sends of this replica's segments to verify, oldest first. Only once they have been
-- in doubt for longer than a gateway call can take: a request still travelling must not be "proved" undelivered.
-- A send put in doubt by a forced release keeps its holder's lease_until (pacer_force_release_item):
-- the holder may still be making its call until then, so it waits for that too (any other
-- in-doubt item has none: its lease was over or cleared). Each with its job's tenant: it is
-- verified with that tenant's gateway. An item whose guid keeps a quiet a gateway asked of it (a
-- rate limit's Retry-After, on the guid's lease row) is not read at all while the quiet lasts,
-- up to %(quiet_hold)s from the start of its episode: a guid the gateway limits does not hold
-- the other guids' items back behind its own at the head of the read. Past that hold it is read
-- with what is left of its quiet (quiet_s; 0: none), and decided without a lookup (a quiet about
-- to end is waited out for one: the verifier's QUIET_GRACE_S).
SELECT item_id::text AS item_id, guid, idem_key, updated_at,
       (SELECT j.tenant FROM jobs j WHERE j.job_id = items.job_id) AS tenant,
       greatest((SELECT extract(epoch FROM g.gateway_quiet_until - now())::float8
                 FROM guid_leases g WHERE g.guid = items.guid), 0) AS quiet_s
FROM items
WHERE status = 'recovery_pending' AND updated_at < now() - %(settle)s::interval
  AND (lease_until IS NULL OR lease_until < now())
  AND {guid_segment} = ANY(%(segments)s::int[])
  AND NOT (updated_at > now() - %(quiet_hold)s::interval
           AND EXISTS (SELECT 1 FROM guid_leases g WHERE g.guid = items.guid AND g.gateway_quiet_until > now()))
ORDER BY updated_at
LIMIT %(limit)s
