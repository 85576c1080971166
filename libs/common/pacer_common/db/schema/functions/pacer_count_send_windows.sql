-- A guid's send counts per minute / hour / day window, kept beside its last send time so
-- that a handover keeps the window limits as well as the spacing.
-- windows = {"minute": [window index, sends, end], "hour": [...], "day": [...]}, where `end`
-- is the epoch second the window ends. The minute and the hour are UTC's: index
-- floor(epoch seconds / size). The day is the guid's calendar day in its time zone, from one
-- local midnight to the next (pacer_local_time), as pacer_common.domain.limits.Pacing.window
-- has it, numbered floor(local epoch seconds / 86400). The time zone is the guid's as the senders
-- resolve it: its own `timezone` in guid_limits, else every guid's (`*`), else the sender's
-- own default (the session setting pacer.timezone, which senders set from
-- PACER_SENDER_TIMEZONE), else Asia/Shanghai. It is read at the guid's first send past its
-- day's end: a day under way goes on to its end, and a new day whose start the last one
-- overlaps (a new time zone; a row kept before the day was the guid's, [index, sends] of a
-- UTC day) counts that day's sends too: never fewer sends than were made in it.
CREATE OR REPLACE FUNCTION pacer_count_send_windows() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    e double precision := extract(epoch FROM NEW.last_send_at);
    w jsonb := COALESCE(OLD.windows, '{}');
    m bigint := floor(e / 60);
    h bigint := floor(e / 3600);
    d jsonb := w -> 'day';
    tz text;
    local_at timestamp;
BEGIN
    IF NEW.last_send_at IS NULL OR NEW.last_send_at IS NOT DISTINCT FROM OLD.last_send_at THEN
        RETURN NEW;
    END IF;
    IF (d ->> 2)::float8 > e THEN
        d := jsonb_build_array(d -> 0, (d ->> 1)::bigint + 1, d -> 2);
    ELSE
        SELECT COALESCE(max(gl.limits ->> 'timezone') FILTER (WHERE gl.guid = NEW.guid),
                        max(gl.limits ->> 'timezone') FILTER (WHERE gl.guid = '*'))
        INTO tz FROM guid_limits gl WHERE gl.guid IN (NEW.guid, '*');
        tz := COALESCE(tz, NULLIF(current_setting('pacer.timezone', true), ''), 'Asia/Shanghai');
        local_at := NEW.last_send_at AT TIME ZONE tz;
        d := jsonb_build_array(floor(extract(epoch FROM local_at) / 86400)::bigint,
                 CASE WHEN COALESCE((d ->> 2)::float8, ((d ->> 0)::bigint + 1) * 86400.0)
                           > extract(epoch FROM pacer_local_time(date_trunc('day', local_at), tz))
                      THEN (d ->> 1)::bigint + 1 ELSE 1 END,
                 extract(epoch FROM pacer_local_time(date_trunc('day', local_at) + interval '1 day', tz))::bigint);
    END IF;
    NEW.windows := jsonb_build_object(
        'minute', jsonb_build_array(m, CASE WHEN (w -> 'minute' ->> 0)::bigint = m
                                            THEN (w -> 'minute' ->> 1)::bigint + 1 ELSE 1 END, (m + 1) * 60),
        'hour', jsonb_build_array(h, CASE WHEN (w -> 'hour' ->> 0)::bigint = h
                                          THEN (w -> 'hour' ->> 1)::bigint + 1 ELSE 1 END, (h + 1) * 3600),
        'day', d);
    RETURN NEW;
END
$fn$;
