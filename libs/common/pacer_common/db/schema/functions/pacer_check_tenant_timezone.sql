-- A tenant's time zone must be a full IANA name this server knows: its quota's day is counted
-- in it (pacer_tenant_day). Abbreviations (JST), POSIX strings (UTC+8, which Postgres reads
-- as UTC-8) and names in the wrong case are refused, as for a guid's (pacer_check_limits_timezone).
CREATE OR REPLACE FUNCTION pacer_check_tenant_timezone() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    IF NEW.timezone IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_timezone_names z WHERE z.name = NEW.timezone) THEN
        RAISE EXCEPTION 'time zone % is not one this database knows: use an IANA name such as Asia/Shanghai',
            to_jsonb(NEW.timezone) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN NEW;
END
$fn$;
