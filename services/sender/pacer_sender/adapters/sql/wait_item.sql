-- A pending media item waits for its media: due again at %(until)s, the reason on the item
-- (visible in the Control API as its `waiting` reason). Not a status change: no event.
UPDATE items SET not_before = %(until)s, last_error_class = 'media_pending', last_error = %(reason)s,
       updated_at = now()
WHERE item_id = %(item)s::uuid AND status = 'pending'
RETURNING item_id
