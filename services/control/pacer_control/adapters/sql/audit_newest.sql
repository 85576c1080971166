-- The audit log, newest first (optionally before an id).
SELECT id, at, actor, action, target_type, target_id, reason, before, after, xid::text || '.' || id AS position
FROM audit_log
WHERE (%(target_type)s::text IS NULL OR target_type = %(target_type)s::text)
  AND (%(target_id)s::text IS NULL OR target_id = %(target_id)s::text)
  AND (%(actor)s::text IS NULL OR actor = %(actor)s::text)
  AND (%(before)s::bigint IS NULL OR id < %(before)s::bigint)
ORDER BY id DESC
LIMIT %(limit)s
