-- The audit log after an id, oldest first: what happened since the last look.
SELECT id, at, actor, action, target_type, target_id, reason, before, after
FROM audit_log
WHERE (%(target_type)s::text IS NULL OR target_type = %(target_type)s::text)
  AND (%(target_id)s::text IS NULL OR target_id = %(target_id)s::text)
  AND (%(actor)s::text IS NULL OR actor = %(actor)s::text)
  AND id > %(after)s::bigint
ORDER BY id
LIMIT %(limit)s
