-- Reserve the business idempotency key for this item before sending. Returns the holder:
-- this item when the key was free (or already ours), another item when it is taken.
WITH ins AS (
    INSERT INTO send_ledger (idem_key, item_id, guid, to_id, state)
    VALUES (%(idem_key)s, %(item_id)s, %(guid)s, %(to_id)s, 'reserved')
    ON CONFLICT (idem_key) DO NOTHING
    RETURNING item_id, state
)
SELECT item_id::text AS holder, state FROM ins
UNION ALL
SELECT item_id::text, state FROM send_ledger
WHERE idem_key = %(idem_key)s AND NOT EXISTS (SELECT 1 FROM ins)
