-- The audit log, newest first (optionally before an id). Each entry's position is where a
-- tail that starts from it begins: the entry's own, or, while a transaction older than it is
-- still running (whose entries would sort before it), the oldest such transaction's, so
-- that the tail passes nothing (it may show this entry again).
SELECT id, at, actor, action, target_type, target_id, reason, before, after,
       CASE WHEN xid < pg_snapshot_xmin(pg_current_snapshot()) THEN xid::text || '.' || id
            ELSE pg_snapshot_xmin(pg_current_snapshot())::text || '.0' END AS position
FROM audit_log
WHERE (%(target_type)s::text IS NULL OR target_type = %(target_type)s::text)
  AND (%(target_id)s::text IS NULL OR target_id = %(target_id)s::text)
  AND (%(actor)s::text IS NULL OR actor = %(actor)s::text)
  AND (%(before)s::bigint IS NULL OR id < %(before)s::bigint)
ORDER BY id DESC
LIMIT %(limit)s
