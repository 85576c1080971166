-- A media.ready callback: the guid's media becomes ready (ok) or failed, once; a repeated or
-- late callback finds it settled and changes nothing.
UPDATE media SET status = CASE WHEN %(ok)s THEN 'ready' ELSE 'failed' END, reason = %(reason)s,
       settled_at = now(), settled_by = 'callback'
WHERE guid = %(guid)s AND media_id = %(media_id)s AND status = 'pending'
RETURNING true AS changed
