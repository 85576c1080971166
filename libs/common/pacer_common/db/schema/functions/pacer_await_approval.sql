-- The system holds a running job for an admin's approval (running → awaiting_approval, the
-- reason as the job's hold reason), audited. A requery job is held so when the items its pages
-- brought pass the approval size (page_approval.sql, in the page's transaction). No-op (false)
-- for a job that is not running, and for one an admin has approved already: an approved job is
-- never asked again. Its items are then held by pacer_begin_send like a paused job's, and
-- approval (pacer_decide_approval) releases them and lets paging go on.
CREATE OR REPLACE FUNCTION pacer_await_approval(p_job uuid, p_reason text, p_actor text)
RETURNS boolean
LANGUAGE plpgsql AS $fn$
BEGIN
    RETURN pacer_hold_running_job(p_job, p_reason, p_actor, 'awaiting_approval', 'await_approval', true);
END
$fn$;
