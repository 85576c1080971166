-- The answer of a /media/status poll of one mediaId. A media already settled (by a callback)
-- stays as it is; one uploaded again meanwhile (another mediaId) is not touched: no row.
UPDATE media SET checked_at = now(),
       status = CASE WHEN status = 'pending' THEN %(status)s ELSE status END,
       reason = CASE WHEN status = 'pending' THEN %(reason)s ELSE reason END,
       settled_at = CASE WHEN status = 'pending' AND %(status)s <> 'pending' THEN now() ELSE settled_at END,
       settled_by = CASE WHEN status = 'pending' AND %(status)s <> 'pending' THEN 'poll' ELSE settled_by END
WHERE guid = %(guid)s AND url_hash = %(hash)s AND media_id = %(media_id)s
RETURNING media_id, status, reason, uploaded_at, checked_at, generation
