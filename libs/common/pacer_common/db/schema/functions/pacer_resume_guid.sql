-- Resume a guid (an operator action: someone brought the account back): clears its pause
-- and, if its lifecycle state holds it (offline, kicked, unauthorized), sets it `online`
-- (source `operator`; a later device.status callback still wins). Audited.
CREATE OR REPLACE FUNCTION pacer_resume_guid(p_guid text, p_actor text, p_reason text DEFAULT NULL)
RETURNS TABLE (outcome text, message text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    was text;
    known boolean;
    st guid_state;
BEGIN
    SELECT l.paused_reason INTO was FROM guid_leases l WHERE l.guid = p_guid FOR UPDATE;
    known := FOUND;
    SELECT h.state INTO st FROM guid_states h WHERE h.guid = p_guid FOR UPDATE;
    known := known OR FOUND;
    IF NOT known THEN
        RETURN QUERY SELECT 'not_found'::text, format('no guid %s', p_guid);
        RETURN;
    END IF;
    IF was IS NULL AND COALESCE(st, 'online') = 'online' THEN
        RETURN QUERY SELECT 'noop'::text, 'guid is not paused'::text;
        RETURN;
    END IF;
    IF was IS NOT NULL THEN
        UPDATE guid_leases SET paused_reason = NULL, paused_by = NULL, paused_at = NULL WHERE guid = p_guid;
    END IF;
    IF st IS NOT NULL AND st <> 'online' THEN
        PERFORM pacer_set_guid_state(p_guid, 'online', 'operator', COALESCE(p_reason, 'resumed by ' || p_actor),
                                     clock_timestamp());
    END IF;
    PERFORM pacer_audit(p_actor, 'resume', 'guid', p_guid, p_reason,
                        jsonb_build_object('paused', was IS NOT NULL, 'paused_reason', was, 'state', st),
                        jsonb_build_object('paused', false, 'state', CASE WHEN st IS NULL THEN NULL ELSE 'online' END));
    RETURN QUERY SELECT 'done'::text,
        format('guid %s resumed (was %s)', p_guid, concat_ws(', ', 'paused: ' || was, NULLIF(st::text, 'online')));
END
$fn$;
