-- One keyset page of a job's items, by item id.
SELECT item_id::text AS item_id, shard_id, guid, to_id, status::text AS status, attempts, priority, held,
       compensates::text AS compensates, last_error_class, last_error, next_attempt_at, expire_at,
       created_at, updated_at
FROM items
WHERE job_id = %(job)s::uuid
  AND (%(statuses)s::item_status[] IS NULL OR status = ANY(%(statuses)s::item_status[]))
  AND (%(guid)s::text IS NULL OR guid = %(guid)s::text)
  AND (%(error_class)s::text IS NULL OR last_error_class = %(error_class)s::text)
  AND (NOT %(with_error)s OR last_error_class IS NOT NULL)
  AND (%(after)s::uuid IS NULL OR item_id > %(after)s::uuid)
ORDER BY items.item_id  -- the uuid column, as in the WHERE (not the text alias)
LIMIT %(limit)s
