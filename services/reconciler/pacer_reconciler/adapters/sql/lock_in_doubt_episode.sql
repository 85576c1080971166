-- Lock an in-doubt item for its verdict, only while it is still in the episode the lookup was
-- made for: recovery_pending with the updated_at it was read with (due_in_doubt.sql). Any move
-- since (verified, sent again, in doubt again) sets a new updated_at (pacer_transition), so an
-- old lookup's answer never decides a newer send. Under READ COMMITTED a row changed while we
-- waited for its lock is checked again as it now stands.
SELECT item_id FROM items
WHERE item_id = %(i)s::uuid AND status = 'recovery_pending' AND updated_at = %(since)s::timestamptz
FOR UPDATE
