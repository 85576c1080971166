-- An upload the gateway answered (under the guid's lease, so once per media per guid and
-- generation; an upload repeated after a crash carries the same idempotency key and gets the
-- same mediaId). An upload again, after PACER_SENDER_MEDIA_REUSE_S, replaces the row.
INSERT INTO media AS m (guid, url_hash, url, kind, file_name, media_id, status, reason, settled_at, settled_by,
                        generation)
VALUES (%(guid)s, %(hash)s, %(url)s, %(kind)s, %(file_name)s, %(media_id)s, %(status)s, %(reason)s,
        CASE WHEN %(status)s <> 'pending' THEN now() END, CASE WHEN %(status)s <> 'pending' THEN 'upload' END,
        %(generation)s)
ON CONFLICT (guid, url_hash) DO UPDATE SET media_id = EXCLUDED.media_id, status = EXCLUDED.status,
    generation = EXCLUDED.generation,
    reason = EXCLUDED.reason, uploaded_at = now(), checked_at = NULL, settled_at = EXCLUDED.settled_at,
    settled_by = EXCLUDED.settled_by
RETURNING media_id, status, reason, uploaded_at, checked_at, generation
