-- Apply one lifecycle event of a guid (a device.status callback, a send failure, an
-- operator): it takes effect only if its ts is newer than the newest event applied, so a
-- late, repeated or reordered event never overrides a newer state. A newer event of the
-- same state only moves event_ts; a new state starts `since`, is kept in the history and,
-- leaving a hold for `online`, requests the release of the guid's held items (trigger
-- guid_states_online). Returns whether the state changed, and the state before and after.
CREATE OR REPLACE FUNCTION pacer_set_guid_state(p_guid text, p_state guid_state, p_source text, p_reason text,
                                                p_ts timestamptz)
RETURNS TABLE (changed boolean, previous guid_state, state guid_state)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    cur record;
BEGIN
    SELECT g.state, g.event_ts INTO cur FROM guid_states g WHERE g.guid = p_guid FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO guid_states (guid, state, since, source, reason, event_ts, changes)
        VALUES (p_guid, p_state, now(), p_source, p_reason, p_ts, 1)
        ON CONFLICT (guid) DO NOTHING;
        IF FOUND THEN
            INSERT INTO guid_state_history (guid, state, previous, event_ts, source, reason)
            VALUES (p_guid, p_state, NULL, p_ts, p_source, p_reason);
            RETURN QUERY SELECT true, NULL::guid_state, p_state;
            RETURN;
        END IF;
        -- inserted meanwhile by a concurrent event: apply on top of it
        SELECT g.state, g.event_ts INTO cur FROM guid_states g WHERE g.guid = p_guid FOR UPDATE;
    END IF;
    IF p_ts <= cur.event_ts THEN
        RETURN QUERY SELECT false, cur.state, cur.state;
        RETURN;
    END IF;
    IF cur.state = p_state THEN
        UPDATE guid_states SET event_ts = p_ts, events = events + 1 WHERE guid = p_guid;
        RETURN QUERY SELECT false, cur.state, cur.state;
        RETURN;
    END IF;
    UPDATE guid_states SET state = p_state, since = now(), source = p_source, reason = p_reason, event_ts = p_ts,
                           events = events + 1, changes = changes + 1
    WHERE guid = p_guid;
    INSERT INTO guid_state_history (guid, state, previous, event_ts, source, reason)
    VALUES (p_guid, p_state, cur.state, p_ts, p_source, p_reason);
    RETURN QUERY SELECT true, cur.state, p_state;
END
$fn$;
