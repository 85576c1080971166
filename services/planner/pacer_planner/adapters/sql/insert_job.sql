INSERT INTO jobs (job_id, request_id, kind, priority, created_by, message, content_version,
                  target_mode, total, expire_at, not_before, budget_max_sends, request)
VALUES (%(job_id)s, %(request_id)s, %(kind)s, %(priority)s, %(created_by)s, %(message)s,
        %(content_version)s, %(target_mode)s, %(total)s, %(expire_at)s, %(not_before)s,
        %(budget_max_sends)s, %(request)s)
ON CONFLICT (request_id) DO NOTHING
RETURNING job_id
