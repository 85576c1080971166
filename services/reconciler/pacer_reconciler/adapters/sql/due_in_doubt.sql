-- In-doubt sends of this replica's segments to verify, oldest first. Only once they have been
-- in doubt for longer than a gateway call can take: a request still travelling must not be "proved" undelivered.
-- Each with its job's tenant: it is verified with that tenant's gateway.
SELECT item_id::text AS item_id, guid, idem_key, updated_at,
       (SELECT j.tenant FROM jobs j WHERE j.job_id = items.job_id) AS tenant
FROM items
WHERE status = 'recovery_pending' AND updated_at < now() - %(settle)s::interval
  AND {guid_segment} = ANY(%(segments)s::int[])
ORDER BY updated_at
LIMIT %(limit)s
