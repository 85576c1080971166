-- An upload the gateway answered (under the guid's lease, so once per media per guid and
-- generation; an upload repeated after a crash carries the same idempotency key and gets the
-- same mediaId). An upload again, after PACER_SENDER_MEDIA_REUSE_S, replaces the row.
--
-- A mediaId is the guid's once (media_by_id): a row of the guid holding this mediaId under
-- another hash is superseded (deleted) first, in this statement. A gateway that deduplicates
-- by url answers the same mediaId to a new upload of a url a row keyed by the old url-only
-- hash (before migration 0047) holds; without this the row could never be written, and the
-- item failed as an internal error after its retries. The source reads `superseded`, so the
-- DELETE runs before the INSERT checks the index (an unread data-modifying WITH runs after).
WITH superseded AS (
    DELETE FROM media WHERE guid = %(guid)s AND media_id = %(media_id)s AND url_hash <> %(hash)s
    RETURNING url_hash
)
INSERT INTO media AS m (guid, url_hash, url, kind, file_name, media_id, status, reason, settled_at, settled_by,
                        generation)
SELECT %(guid)s, %(hash)s, %(url)s, %(kind)s, %(file_name)s::text, %(media_id)s, %(status)s, %(reason)s::text,
       CASE WHEN %(status)s <> 'pending' THEN now() END, CASE WHEN %(status)s <> 'pending' THEN 'upload' END,
       %(generation)s
FROM (SELECT count(*) FROM superseded) AS s
ON CONFLICT (guid, url_hash) DO UPDATE SET media_id = EXCLUDED.media_id, status = EXCLUDED.status,
    generation = EXCLUDED.generation,
    reason = EXCLUDED.reason, uploaded_at = now(), checked_at = NULL, settled_at = EXCLUDED.settled_at,
    settled_by = EXCLUDED.settled_by
RETURNING media_id, status, reason, uploaded_at, checked_at, generation
