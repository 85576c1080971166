-- In-doubt sends of this replica's segments to verify, oldest first. Only once they have been
-- in doubt for longer than a gateway call can take: a request still travelling must not be "proved" undelivered.
-- A send put in doubt by a forced release keeps its holder's lease_until (pacer_force_release_item):
-- the holder may still be making its call until then, so it waits for that too (any other
-- in-doubt item has none: its lease was over or cleared). Each with its job's tenant: it is
-- verified with that tenant's gateway; and with what is left of a quiet a gateway asked of its
-- guid (a rate limit's Retry-After, kept on the guid's lease row; 0: none), counted on Postgres'
-- clock as the row's end is: until it is over the item is not looked up.
SELECT item_id::text AS item_id, guid, idem_key, updated_at,
       (SELECT j.tenant FROM jobs j WHERE j.job_id = items.job_id) AS tenant,
       greatest((SELECT extract(epoch FROM g.gateway_quiet_until - now())::float8
                 FROM guid_leases g WHERE g.guid = items.guid), 0) AS quiet_s
FROM items
WHERE status = 'recovery_pending' AND updated_at < now() - %(settle)s::interval
  AND (lease_until IS NULL OR lease_until < now())
  AND {guid_segment} = ANY(%(segments)s::int[])
ORDER BY updated_at
LIMIT %(limit)s
