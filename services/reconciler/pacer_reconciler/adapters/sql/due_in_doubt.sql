-- In-doubt sends to verify, oldest first.
SELECT item_id::text AS item_id, guid, idem_key, updated_at
FROM items
WHERE status = 'recovery_pending'
ORDER BY updated_at
LIMIT %(limit)s
