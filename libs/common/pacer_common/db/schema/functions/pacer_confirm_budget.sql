-- Confirm a larger budget. A job paused because its budget ran out resumes. Audited.
-- Only the budget's own pause (pacer_begin_send: paused_by 'system:budget') is lifted: an
-- operator may pause a job with the free-text reason 'budget_exhausted' too, and that pause
-- is the operator's to lift.
CREATE OR REPLACE FUNCTION pacer_confirm_budget(p_job uuid, p_max_sends bigint, p_actor text)
RETURNS TABLE (outcome text, message text, status text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    j jobs%ROWTYPE;
    resumed boolean := false;
BEGIN
    SELECT * INTO j FROM jobs WHERE job_id = p_job FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, format('no job %s', p_job), NULL::text;
        RETURN;
    END IF;
    IF p_max_sends <= j.budget_used THEN
        RETURN QUERY SELECT 'conflict'::text, format('a budget of %s sends is not above the %s already used',
                                                     p_max_sends, j.budget_used), j.status;
        RETURN;
    END IF;
    UPDATE jobs SET budget_max_sends = p_max_sends WHERE job_id = p_job;
    IF j.status = 'paused' AND j.paused_reason = 'budget_exhausted' AND j.paused_by = 'system:budget' THEN
        UPDATE jobs SET status = 'running', paused_reason = NULL, paused_by = NULL, paused_at = NULL
        WHERE job_id = p_job;
        resumed := true;
    END IF;
    PERFORM pacer_audit(p_actor, 'confirm_budget', 'job', p_job::text, NULL,
        jsonb_build_object('budget_max_sends', j.budget_max_sends, 'budget_used', j.budget_used, 'status', j.status),
        jsonb_build_object('budget_max_sends', p_max_sends, 'status', CASE WHEN resumed THEN 'running' ELSE j.status END));
    RETURN QUERY SELECT 'done'::text,
        format('budget set to %s sends (%s used)%s', p_max_sends, j.budget_used,
               CASE WHEN resumed THEN '; job resumed' ELSE '' END),
        CASE WHEN resumed THEN 'running' ELSE j.status END;
END
$fn$;
