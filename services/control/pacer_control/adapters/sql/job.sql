-- One job's own fields, budget and hold.
SELECT job_id::text AS job_id, request_id, kind, priority, status, paused_reason, paused_by, paused_at,
       target_mode, created_by, created_at, dispatched_at, started_at, finished_at, expire_at, not_before,
       total, budget_max_sends, budget_used, tenant
FROM jobs WHERE job_id = %(job)s::uuid
