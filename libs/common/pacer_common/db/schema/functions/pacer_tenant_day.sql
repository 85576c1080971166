-- A tenant's today, the day its sends_per_day counts, and the instant it ends: its calendar
-- day in its own time zone (tenants.timezone), else in the senders' (the session setting
-- pacer.timezone on a sender's connections; elsewhere the zone the sender seen last published
-- in sender_limits: the senders of one fleet share PACER_SENDER_TIMEZONE), else in
-- Asia/Shanghai, the senders' default. The day ends at the next local midnight (the earlier
-- where it comes twice, pacer_local_time). The database alone decides a tenant's day: the
-- senders take it, and its end, from tenant_usage.sql.
CREATE OR REPLACE FUNCTION pacer_tenant_day(p_zone text, OUT day date, OUT ends_at timestamptz)
LANGUAGE sql STABLE AS $fn$
    SELECT d, pacer_local_time((d + 1)::timestamp, z)
    FROM (SELECT COALESCE(p_zone, NULLIF(current_setting('pacer.timezone', true), ''),
                          (SELECT s.limits ->> 'timezone' FROM sender_limits s ORDER BY s.seen_at DESC LIMIT 1),
                          'Asia/Shanghai') AS z) AS zone
    CROSS JOIN LATERAL (SELECT (now() AT TIME ZONE zone.z)::date AS d) AS today
$fn$;
