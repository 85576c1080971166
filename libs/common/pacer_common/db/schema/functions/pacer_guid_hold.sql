-- Why a guid holds its queue, or NULL: an operator's or breaker's pause, or a lifecycle
-- state other than online. Passed to pacer_hold_reason as its guid reason.
CREATE OR REPLACE FUNCTION pacer_guid_hold(p_paused_reason text, p_state text, p_state_reason text)
RETURNS text
LANGUAGE sql IMMUTABLE AS $fn$
    SELECT CASE
        WHEN p_paused_reason IS NOT NULL THEN 'paused: ' || p_paused_reason
        WHEN p_state IS NOT NULL AND p_state <> 'online' THEN p_state || COALESCE(': ' || p_state_reason, '')
    END;
$fn$;
