-- A send of this mediaId refused with the gateway's bad_params code: the gateway no longer
-- knows the media. The record goes stale, so the next item uploads it again (the next
-- generation, a key of its own). Only this mediaId: a record uploaded again meanwhile (another
-- mediaId) is not touched, and gives no row.
UPDATE media SET status = 'stale', reason = %(reason)s, settled_at = now(), settled_by = 'send'
WHERE guid = %(guid)s AND url_hash = %(hash)s AND media_id = %(media_id)s
RETURNING true AS stale
