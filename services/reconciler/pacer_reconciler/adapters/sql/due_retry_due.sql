-- Candidates for the 'retry_due' sweep in this replica's segments, oldest first; SKIP LOCKED keeps
-- off rows in use.
SELECT item_id::text AS item_id, guid, idem_key, updated_at
FROM items
WHERE status = 'waiting_retry' AND next_attempt_at <= now()
  AND {guid_segment} = ANY(%(segments)s::int[])
ORDER BY updated_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
