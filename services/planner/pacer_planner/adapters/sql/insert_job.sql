-- A new job: running, or awaiting an admin's approval when the planner's policy says so
-- (pacer_approval_reason; the reason is kept as the job's hold reason). The request's trace
-- context is the job's (and each of its items'). ``item_content`` is the content its items
-- share, stored here once: an item whose content is this one stores none.
WITH decision AS (
    SELECT pacer_approval_reason(%(total)s::bigint, %(message)s::jsonb, %(approval_above)s::bigint,
                                 %(approve_new)s::boolean) AS reason
)
INSERT INTO jobs (job_id, request_id, kind, priority, created_by, message, content_version,
                  target_mode, total, expire_at, not_before, budget_max_sends, request, tenant,
                  coalesce_key, coalesce_version, target_fetched, target_complete_at, traceparent, item_content,
                  status, paused_reason, paused_by, paused_at, created_at)
VALUES (%(job_id)s, %(request_id)s, %(kind)s, %(priority)s, %(created_by)s, %(message)s,
        %(content_version)s, %(target_mode)s, %(total)s, %(expire_at)s, %(not_before)s,
        %(budget_max_sends)s, %(request)s, %(tenant)s, %(coalesce_key)s, %(coalesce_version)s,
        %(total)s, CASE WHEN %(target_complete)s THEN now() END, %(traceparent)s, %(item_content)s,
        (SELECT CASE WHEN d.reason IS NULL THEN 'running' ELSE 'awaiting_approval' END FROM decision d),
        (SELECT d.reason FROM decision d),
        (SELECT CASE WHEN d.reason IS NOT NULL THEN 'system:planner' END FROM decision d),
        (SELECT CASE WHEN d.reason IS NOT NULL THEN now() END FROM decision d),
        %(created_at)s)
ON CONFLICT (request_id) DO NOTHING
RETURNING job_id
