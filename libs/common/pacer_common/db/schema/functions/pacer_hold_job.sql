-- Pause a running job by the system (budget, breaker), with an audit record. No-op otherwise.
CREATE OR REPLACE FUNCTION pacer_hold_job(p_job uuid, p_reason text, p_actor text)
RETURNS boolean
LANGUAGE plpgsql AS $fn$
BEGIN
    RETURN pacer_hold_running_job(p_job, p_reason, p_actor, 'paused', 'pause', false);
END
$fn$;
