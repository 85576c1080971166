-- A time zone stored in guid_limits or tenants must be a full IANA name this server knows, as
-- the senders' zoneinfo reads it: the send windows' trigger counts a guid's days in it, a
-- tenant's quota its days, and a name it did not know would stop those sends. Abbreviations
-- (JST), POSIX strings (UTC+8, which Postgres reads as UTC-8) and names in the wrong case are
-- refused too. The trigger's arguments are the path to the zone in the row (`limits`,
-- `timezone`; or `timezone`).
CREATE OR REPLACE FUNCTION pacer_check_limits_timezone() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    zone text := to_jsonb(NEW) #>> TG_ARGV;
BEGIN
    IF zone IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_timezone_names z WHERE z.name = zone) THEN
        RAISE EXCEPTION 'time zone % is not one this database knows: use an IANA name such as Asia/Shanghai',
            to_jsonb(zone) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN NEW;
END
$fn$;
