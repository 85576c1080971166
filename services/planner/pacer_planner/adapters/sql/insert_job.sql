INSERT INTO jobs (job_id, request_id, kind, priority, created_by, message, content_version,
                  target_mode, total, expire_at, not_before, budget_max_sends, request,
                  coalesce_key, coalesce_version, target_fetched, target_complete_at)
VALUES (%(job_id)s, %(request_id)s, %(kind)s, %(priority)s, %(created_by)s, %(message)s,
        %(content_version)s, %(target_mode)s, %(total)s, %(expire_at)s, %(not_before)s,
        %(budget_max_sends)s, %(request)s, %(coalesce_key)s, %(coalesce_version)s,
        %(total)s, CASE WHEN %(target_complete)s THEN now() END)
ON CONFLICT (request_id) DO NOTHING
RETURNING job_id
