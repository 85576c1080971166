-- Pause a running job by the system (budget, breaker), with an audit record. No-op otherwise.
CREATE OR REPLACE FUNCTION pacer_hold_job(p_job uuid, p_reason text, p_actor text)
RETURNS boolean
LANGUAGE plpgsql AS $fn$
BEGIN
    UPDATE jobs SET status = 'paused', paused_reason = p_reason, paused_by = p_actor, paused_at = now()
    WHERE job_id = p_job AND status = 'running';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pacer_audit(p_actor, 'pause', 'job', p_job::text, p_reason,
                        jsonb_build_object('status', 'running'),
                        jsonb_build_object('status', 'paused', 'paused_reason', p_reason));
    RETURN true;
END
$fn$;
