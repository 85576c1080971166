-- Pause or resume one shard (a guid's part of a job). Audited. A shard resumed with nothing
-- left open (its items expired while it was paused: the reconciler's expire_due sweep) is
-- completed, and its job with it when it was the job's last open shard: no event would come
-- for the reconciler to complete either (a requery job with pages to come stays running:
-- pacer_guard_requery_completion); its message says so, and whether the job completed too.
-- The shard row, then the job's: the reconciler's order.
CREATE OR REPLACE FUNCTION pacer_shard_action(p_shard bigint, p_action text, p_actor text, p_reason text DEFAULT NULL)
RETURNS TABLE (outcome text, message text, status text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    s shards%ROWTYPE;
    after_status text;
    job_completed boolean;  -- the shard's job completed with it
BEGIN
    SELECT * INTO s FROM shards WHERE shard_id = p_shard FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, format('no shard %s', p_shard), NULL::text;
        RETURN;
    END IF;
    IF p_action = 'pause' THEN
        IF s.status = 'paused' THEN
            RETURN QUERY SELECT 'noop'::text, 'shard is already paused'::text, s.status;
            RETURN;
        ELSIF s.status NOT IN ('pending', 'running') THEN
            RETURN QUERY SELECT 'conflict'::text, format('shard is %s; only an open shard can be paused', s.status), s.status;
            RETURN;
        END IF;
        after_status := 'paused';
        UPDATE shards SET status = 'paused', paused_reason = COALESCE(p_reason, 'operator'), paused_by = p_actor
        WHERE shard_id = p_shard;
    ELSIF p_action = 'resume' THEN
        IF s.status <> 'paused' THEN
            RETURN QUERY SELECT 'noop'::text, format('shard is %s, not paused', s.status), s.status;
            RETURN;
        END IF;
        after_status := CASE WHEN pacer_job_open(s.job_id, p_shard) THEN 'running' ELSE 'completed' END;
        UPDATE shards SET status = after_status, paused_reason = NULL, paused_by = NULL WHERE shard_id = p_shard;
        IF after_status = 'completed' THEN
            -- The job's row first, in a statement of its own, as the reconciler's refresh_jobs
            -- takes it: the check below then sees a shard it completed meanwhile (its snapshot
            -- is taken after the lock), and it sees this one.
            PERFORM 1 FROM jobs WHERE job_id = s.job_id FOR NO KEY UPDATE;
            UPDATE jobs j SET status = 'completed', finished_at = now(), started_at = COALESCE(j.started_at, now())
            WHERE j.job_id = s.job_id AND j.status = 'running'
              AND NOT EXISTS (SELECT 1 FROM shards o WHERE o.job_id = s.job_id AND o.status <> 'completed')
            RETURNING j.status = 'completed' INTO job_completed;  -- NULL: not its last open shard
        END IF;
    ELSE
        RAISE EXCEPTION 'unknown shard action %', p_action USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pacer_audit(p_actor, p_action, 'shard', p_shard::text, p_reason,
        jsonb_build_object('status', s.status, 'paused_reason', s.paused_reason),
        jsonb_build_object('status', after_status, 'paused_reason', CASE WHEN after_status = 'paused'
                                                                     THEN COALESCE(p_reason, 'operator') END));
    RETURN QUERY SELECT 'done'::text, format('shard %s: %s → %s', p_action, s.status, after_status)
        || CASE WHEN after_status <> 'completed' THEN ''
                ELSE '; nothing of it was left open (its items ended while it was paused: expired, sent or cancelled)'
                     || CASE WHEN job_completed THEN format('; job %s completed too: this was its last open shard',
                                                            s.job_id) ELSE '' END
           END,
        after_status;
END
$fn$;
