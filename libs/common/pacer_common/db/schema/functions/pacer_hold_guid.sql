-- Pause a guid (health, breaker, operator), with an audit record. No-op if already paused.
CREATE OR REPLACE FUNCTION pacer_hold_guid(p_guid text, p_reason text, p_actor text)
RETURNS boolean
LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO guid_leases (guid) VALUES (p_guid) ON CONFLICT DO NOTHING;
    UPDATE guid_leases SET paused_reason = p_reason, paused_by = p_actor, paused_at = now()
    WHERE guid = p_guid AND paused_reason IS NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pacer_audit(p_actor, 'pause', 'guid', p_guid, p_reason, jsonb_build_object('paused', false),
                        jsonb_build_object('paused', true, 'paused_reason', p_reason));
    RETURN true;
END
$fn$;
