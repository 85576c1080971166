-- One audit_log row: who did what, when, to what, with the state before and after. Called
-- in the same transaction as the change it records.
CREATE OR REPLACE FUNCTION pacer_audit(p_actor text, p_action text, p_type text, p_id text, p_reason text,
                            p_before jsonb, p_after jsonb)
RETURNS void
LANGUAGE sql AS $fn$
    INSERT INTO audit_log (actor, action, target_type, target_id, reason, before, after)
    VALUES (p_actor, p_action, p_type, p_id, p_reason, p_before, p_after);
$fn$;
