-- The system holds a running job (→ p_status, the reason as its hold reason, p_actor as who
-- held it), audited as p_action; only a job not approved yet when p_unapproved. False, and
-- nothing written, for any other job. pacer_hold_job (paused: budget, breaker) and
-- pacer_await_approval (awaiting_approval) are this with their own status and action.
CREATE OR REPLACE FUNCTION pacer_hold_running_job(p_job uuid, p_reason text, p_actor text, p_status text,
                                                  p_action text, p_unapproved boolean)
RETURNS boolean
LANGUAGE plpgsql AS $fn$
BEGIN
    UPDATE jobs SET status = p_status, paused_reason = p_reason, paused_by = p_actor, paused_at = now()
    WHERE job_id = p_job AND status = 'running' AND (NOT p_unapproved OR approved_at IS NULL);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pacer_audit(p_actor, p_action, 'job', p_job::text, p_reason,
                        jsonb_build_object('status', 'running'),
                        jsonb_build_object('status', p_status, 'paused_reason', p_reason));
    RETURN true;
END
$fn$;
