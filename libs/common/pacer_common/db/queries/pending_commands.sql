-- The item commands of those of the given items that are still pending, as published:
-- the reconciler re-dispatches with them.
SELECT item_id::text, job_id::text, shard_id, guid, to_id, content, idem_key, priority, kind,
       expire_at, not_before, created_at, traceparent
FROM items
WHERE item_id = ANY(%(ids)s::uuid[]) AND status = 'pending'
