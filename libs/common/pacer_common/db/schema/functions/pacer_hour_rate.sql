-- A guid's sends per second this hour, from its lease's send windows (the senders' own count,
-- `windows -> 'hour'` = [UTC hour number, sends, end]) over the part of the hour gone by (at least a
-- minute, so the first seconds of an hour do not read as a burst). NULL when it has not sent
-- this hour.
CREATE OR REPLACE FUNCTION pacer_hour_rate(p_windows jsonb)
RETURNS float8
LANGUAGE sql STABLE AS $fn$
    SELECT CASE WHEN (p_windows -> 'hour' ->> 0)::bigint = floor(extract(epoch FROM now()) / 3600)
                THEN (p_windows -> 'hour' ->> 1)::float8
                     / greatest(60, extract(epoch FROM now()) - floor(extract(epoch FROM now()) / 3600) * 3600)
           END;
$fn$;
