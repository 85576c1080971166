-- A time zone stored in guid_limits must be a full IANA name this server knows, as the
-- senders' zoneinfo reads it: the send windows' trigger counts the guid's days in it, and a
-- name it did not know would stop every send of the guid there. Abbreviations (JST), POSIX
-- strings (UTC+8, which Postgres reads as UTC-8) and names in the wrong case are refused too.
CREATE OR REPLACE FUNCTION pacer_check_limits_timezone() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    IF NEW.limits ? 'timezone' AND NOT EXISTS (SELECT 1 FROM pg_timezone_names z WHERE z.name = NEW.limits ->> 'timezone') THEN
        RAISE EXCEPTION 'time zone % is not one this database knows: use an IANA name such as Asia/Shanghai',
            NEW.limits -> 'timezone' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN NEW;
END
$fn$;
