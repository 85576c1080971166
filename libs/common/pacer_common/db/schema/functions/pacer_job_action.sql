-- Operator actions on a job, decided under the job's row lock, audited in the same
-- transaction. Outcomes: done, noop (already so), conflict (not allowed now: message says
-- why), not_found.
--   pause     running → paused: no new claims; items in flight finish. Resumable.
--   resume    paused / terminated → running (held items are released by the reconciler).
--             A terminated job only once none of its items is in flight or in doubt; a job
--             paused for its budget only once the budget allows another send.
--   cancel    → cancelled: pending and waiting items abandoned; irreversible; nothing sent
--             is undone. An item in flight then may come back to waiting later (a retry, a
--             send proved not delivered): it is abandoned when it does (pacer_abandon_cancelled),
--             and a cancel of a cancelled job abandons any still left waiting: then it answers
--             done (audited, its message counting them), the job's status unchanged
--             (domain/job_status.py, CANCEL_LEFT_OVER); with none, noop.
--   terminate running / paused → terminated: no new claims, resumable only after
--             reconciliation has settled every item in flight.
CREATE OR REPLACE FUNCTION pacer_job_action(p_job uuid, p_action text, p_actor text, p_reason text DEFAULT NULL)
RETURNS TABLE (outcome text, message text, status text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    j jobs%ROWTYPE;
    n bigint;
    ids uuid[];
    after_status text;
    msg text;
    answer text := 'done';
BEGIN
    SELECT * INTO j FROM jobs WHERE job_id = p_job FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, format('no job %s', p_job), NULL::text;
        RETURN;
    END IF;
    IF p_action = 'pause' THEN
        IF j.status = 'paused' THEN
            RETURN QUERY SELECT 'noop'::text, format('job is already paused (%s)', j.paused_reason), j.status;
            RETURN;
        ELSIF j.status <> 'running' THEN
            RETURN QUERY SELECT 'conflict'::text, format('job is %s; only a running job can be paused', j.status), j.status;
            RETURN;
        END IF;
        UPDATE jobs SET status = 'paused', paused_reason = COALESCE(p_reason, 'operator'), paused_by = p_actor,
                        paused_at = now()
        WHERE job_id = p_job;
    ELSIF p_action = 'resume' THEN
        IF j.status = 'running' THEN
            RETURN QUERY SELECT 'noop'::text, 'job is already running'::text, j.status;
            RETURN;
        ELSIF j.status NOT IN ('paused', 'terminated') THEN
            RETURN QUERY SELECT 'conflict'::text, format('job is %s and cannot be resumed', j.status), j.status;
            RETURN;
        END IF;
        IF j.status = 'terminated' THEN
            SELECT count(*) INTO n FROM items i
            WHERE i.job_id = p_job AND i.status IN ('claimed', 'submitted', 'recovery_pending');
            IF n > 0 THEN
                RETURN QUERY SELECT 'conflict'::text, format('job was terminated and %s of its items are still in '
                    'flight or in doubt; it can be resumed once the reconciler has settled them', n), j.status;
                RETURN;
            END IF;
        END IF;
        IF j.budget_max_sends IS NOT NULL AND j.budget_used >= j.budget_max_sends THEN
            RETURN QUERY SELECT 'conflict'::text, format('budget exhausted (%s of %s sends used): an admin must '
                'confirm a larger budget first', j.budget_used, j.budget_max_sends), j.status;
            RETURN;
        END IF;
        after_status := CASE WHEN pacer_job_open(p_job) THEN 'running' ELSE 'completed' END;
        UPDATE jobs SET status = after_status, paused_reason = NULL, paused_by = NULL, paused_at = NULL,
                        finished_at = CASE WHEN after_status = 'completed' THEN now() END
        WHERE job_id = p_job;
    ELSIF p_action = 'cancel' THEN
        IF j.status = 'completed' THEN
            RETURN QUERY SELECT 'conflict'::text, 'job is completed; there is nothing left to cancel'::text, j.status;
            RETURN;
        END IF;
        SELECT array_agg(i.item_id) INTO ids FROM items i
        WHERE i.job_id = p_job AND i.status IN ('pending', 'waiting_retry');
        IF j.status = 'cancelled' AND ids IS NULL THEN
            RETURN QUERY SELECT 'noop'::text, 'job is already cancelled'::text, j.status;
            RETURN;
        ELSIF j.status <> 'cancelled' THEN
            UPDATE jobs SET status = 'cancelled', finished_at = now(),
                            paused_reason = COALESCE(p_reason, 'cancelled'), paused_by = p_actor, paused_at = now()
            WHERE job_id = p_job;
        END IF;
        -- Cancelled again: what came back to waiting since (an item that was in flight) is
        -- abandoned now; the job's row is left as the first cancel wrote it.
        ids := pacer_abandon_cancelled(ids, p_actor);
        IF j.status = 'cancelled' AND cardinality(ids) = 0 THEN  -- each taken or abandoned meanwhile
            RETURN QUERY SELECT 'noop'::text, 'job is already cancelled'::text, j.status;
            RETURN;
        ELSIF j.status = 'cancelled' THEN  -- done (items changed), the job's status as it was
            msg := format('job was already cancelled; %s of its items had come back to pending or waiting_retry '
                          'since and are abandoned now', cardinality(ids));
        END IF;
    ELSIF p_action = 'terminate' THEN
        IF j.status = 'terminated' THEN
            RETURN QUERY SELECT 'noop'::text, 'job is already terminated'::text, j.status;
            RETURN;
        ELSIF j.status NOT IN ('running', 'paused') THEN
            RETURN QUERY SELECT 'conflict'::text, format('job is %s; only a running or paused job can be terminated',
                j.status), j.status;
            RETURN;
        END IF;
        UPDATE jobs SET status = 'terminated', paused_reason = COALESCE(p_reason, 'terminated'), paused_by = p_actor,
                        paused_at = now()
        WHERE job_id = p_job;
    ELSE
        RAISE EXCEPTION 'unknown job action %', p_action USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT jobs.status INTO after_status FROM jobs WHERE job_id = p_job;
    PERFORM pacer_audit(p_actor, p_action, 'job', p_job::text, p_reason,
        jsonb_build_object('status', j.status, 'paused_reason', j.paused_reason),
        (SELECT jsonb_build_object('status', x.status, 'paused_reason', x.paused_reason,
                                   'abandoned', COALESCE(cardinality(ids), 0))
         FROM jobs x WHERE x.job_id = p_job));
    RETURN QUERY SELECT answer, COALESCE(msg, format('job %s: %s → %s', p_action, j.status, after_status)),
                        after_status;
END
$fn$;
