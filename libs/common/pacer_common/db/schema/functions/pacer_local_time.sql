-- The instant a local time (a timestamp without zone) of time zone p_tz is, the earlier one
-- where that local time comes twice (the clocks going back over it: midnight in Havana or
-- the Azores), as Python's zoneinfo reads it (fold 0). Postgres alone would take the later.
CREATE OR REPLACE FUNCTION pacer_local_time(p_local timestamp, p_tz text)
RETURNS timestamptz
LANGUAGE sql STABLE AS $fn$
    SELECT CASE WHEN ((t - interval '1 hour') AT TIME ZONE p_tz) >= p_local THEN t - interval '1 hour' ELSE t END
    FROM (SELECT p_local AT TIME ZONE p_tz AS t) AS later;
$fn$;
