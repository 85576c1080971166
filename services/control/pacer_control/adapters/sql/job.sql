-- One job's own fields, budget and hold; for a cancelled job, how many of its items wait again
-- (pending or waiting_retry: sends in flight at the cancel that came back since), read from
-- the items themselves (items_job_status): the reconciler's counts still show the items the
-- cancel abandoned until its tail has applied the cancel's events.
SELECT j.job_id::text AS job_id, j.request_id, j.kind, j.priority, j.status, j.paused_reason, j.paused_by,
       j.paused_at, j.target_mode, j.created_by, j.created_at, j.dispatched_at, j.started_at, j.finished_at,
       j.expire_at, j.not_before, j.total, j.budget_max_sends, j.budget_used, j.tenant,
       CASE WHEN j.status = 'cancelled' THEN (
           SELECT count(*) FROM items i WHERE i.job_id = j.job_id AND i.status IN ('pending', 'waiting_retry'))
       END AS waiting_after_cancel
FROM jobs j WHERE j.job_id = %(job)s::uuid
