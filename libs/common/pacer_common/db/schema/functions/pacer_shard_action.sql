-- Pause or resume one shard (a guid's part of a job). Audited.
CREATE OR REPLACE FUNCTION pacer_shard_action(p_shard bigint, p_action text, p_actor text, p_reason text DEFAULT NULL)
RETURNS TABLE (outcome text, message text, status text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    s shards%ROWTYPE;
    after_status text;
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
        after_status := 'running';
        UPDATE shards SET status = 'running', paused_reason = NULL, paused_by = NULL WHERE shard_id = p_shard;
    ELSE
        RAISE EXCEPTION 'unknown shard action %', p_action USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pacer_audit(p_actor, p_action, 'shard', p_shard::text, p_reason,
        jsonb_build_object('status', s.status, 'paused_reason', s.paused_reason),
        jsonb_build_object('status', after_status, 'paused_reason', CASE WHEN after_status = 'paused'
                                                                     THEN COALESCE(p_reason, 'operator') END));
    RETURN QUERY SELECT 'done'::text, format('shard %s: %s → %s', p_action, s.status, after_status), after_status;
END
$fn$;
