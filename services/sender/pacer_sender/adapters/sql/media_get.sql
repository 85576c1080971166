-- The guid's upload of one media (by the hash of its url, kind and file name), if any.
SELECT media_id, status, reason, uploaded_at, checked_at, generation FROM media WHERE guid = %(guid)s AND url_hash = %(hash)s
