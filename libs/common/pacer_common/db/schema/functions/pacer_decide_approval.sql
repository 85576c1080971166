-- An admin approves (→ running, the message recorded as approved) or rejects (→ cancelled,
-- its items abandoned, nothing sent) a job awaiting approval. Audited. An approval is kept on
-- the job (approved_at, approved_by): a requery job held for the items its pages brought
-- (pacer_await_approval) goes on paging and is never asked again. A rejected requery job
-- keeps what its earlier pages sent before it was held; the rest is abandoned. A job approved
-- with nothing left open (every item expired while it waited: the reconciler's expire_due
-- sweep) is completed at once, as resume completes one: no event would come to complete it
-- (a requery job with pages to come stays running: pacer_guard_requery_completion).
CREATE OR REPLACE FUNCTION pacer_decide_approval(p_job uuid, p_approve boolean, p_actor text, p_reason text)
RETURNS TABLE (outcome text, message text, status text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    j jobs%ROWTYPE;
    after_status text;
BEGIN
    SELECT * INTO j FROM jobs WHERE job_id = p_job FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, format('no job %s', p_job), NULL::text;
        RETURN;
    END IF;
    IF j.status <> 'awaiting_approval' THEN
        RETURN QUERY SELECT 'conflict'::text, format('job is %s, not awaiting approval', j.status), j.status;
        RETURN;
    END IF;
    IF p_approve THEN
        UPDATE jobs SET status = CASE WHEN pacer_job_open(p_job) THEN 'running' ELSE 'completed' END,
                        finished_at = CASE WHEN pacer_job_open(p_job) THEN NULL ELSE now() END,
                        paused_reason = NULL, paused_by = NULL, paused_at = NULL,
                        approved_at = now(), approved_by = p_actor
        WHERE job_id = p_job
        RETURNING status INTO after_status;
    END IF;
    PERFORM pacer_audit(p_actor, CASE WHEN p_approve THEN 'approve' ELSE 'reject' END, 'job', p_job::text, p_reason,
        jsonb_build_object('status', j.status, 'paused_reason', j.paused_reason),
        jsonb_build_object('status', CASE WHEN p_approve THEN after_status ELSE 'cancelled' END));
    IF p_approve THEN
        INSERT INTO approved_contents (content_hash, approved_by, job_id)
        VALUES (pacer_content_hash(j.message), p_actor, p_job) ON CONFLICT DO NOTHING;
        RETURN QUERY SELECT 'done'::text, CASE WHEN after_status = 'completed'
            THEN 'job approved: awaiting_approval → completed; nothing of it was left to send (its items '
                 'expired while it waited)'
            ELSE 'job approved: awaiting_approval → running; it starts sending'
                 || CASE WHEN j.target_mode = 'requery' THEN ' and goes on paging, without asking again' ELSE '' END
            END, after_status;
    ELSE
        PERFORM pacer_job_action(p_job, 'cancel', p_actor, COALESCE(p_reason, 'rejected'));
        RETURN QUERY SELECT 'done'::text, 'job rejected: awaiting_approval → cancelled; '
            || CASE WHEN j.target_mode = 'requery' THEN 'nothing more of it is sent' ELSE 'nothing was sent' END,
            'cancelled'::text;
    END IF;
END
$fn$;
