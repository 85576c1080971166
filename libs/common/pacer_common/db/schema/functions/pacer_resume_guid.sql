-- Resume a paused guid (an operator action: someone brought the account back). Audited.
CREATE OR REPLACE FUNCTION pacer_resume_guid(p_guid text, p_actor text, p_reason text DEFAULT NULL)
RETURNS TABLE (outcome text, message text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    was text;
BEGIN
    SELECT l.paused_reason INTO was FROM guid_leases l WHERE l.guid = p_guid FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, format('no guid %s', p_guid);
        RETURN;
    END IF;
    IF was IS NULL THEN
        RETURN QUERY SELECT 'noop'::text, 'guid is not paused'::text;
        RETURN;
    END IF;
    UPDATE guid_leases SET paused_reason = NULL, paused_by = NULL, paused_at = NULL WHERE guid = p_guid;
    PERFORM pacer_audit(p_actor, 'resume', 'guid', p_guid, p_reason,
                        jsonb_build_object('paused', true, 'paused_reason', was), jsonb_build_object('paused', false));
    RETURN QUERY SELECT 'done'::text, format('guid %s resumed (was paused: %s)', p_guid, was);
END
$fn$;
