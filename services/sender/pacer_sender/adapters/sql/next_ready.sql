-- The next ready items of one guid, to fill its sender's in-memory window: pending, not
-- held, due (no not_before, or past it), not already in the window. This is the one place
-- that decides which of a guid's queued items in Postgres go next: for now the most urgent
-- priority first, then the oldest.
SELECT item_id::text, job_id::text, shard_id, guid, to_id, content, idem_key, priority, kind,
       expire_at, not_before, created_at, traceparent
FROM items
WHERE guid = %(guid)s AND status = 'pending' AND NOT held
  AND (not_before IS NULL OR not_before <= now())
  AND item_id::text <> ALL(%(exclude)s::text[])
ORDER BY priority, created_at, item_id
LIMIT %(limit)s
