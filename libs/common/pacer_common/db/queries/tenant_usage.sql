-- Add one sender's sends per tenant to each tenant's today, then read every tenant's total of
-- its today back. A tenant's today is its calendar day in its own time zone, or in the
-- sender's (the session setting pacer.timezone, PACER_SENDER_TIMEZONE) where it names none.
-- %(tenants)s and %(sends)s are parallel arrays (possibly empty).
WITH today AS (
    SELECT t.name AS tenant,
           (now() AT TIME ZONE COALESCE(t.timezone, NULLIF(current_setting('pacer.timezone', true), ''),
                                        'Asia/Shanghai'))::date AS day
    FROM tenants t
), added AS (
    INSERT INTO tenant_usage AS u (tenant, day, sends)
    SELECT x.t, d.day, x.n FROM unnest(%(tenants)s::text[], %(sends)s::bigint[]) AS x(t, n)
    JOIN today d ON d.tenant = x.t
    ON CONFLICT (tenant, day) DO UPDATE SET sends = u.sends + EXCLUDED.sends
    RETURNING u.tenant, u.day, u.sends
)
SELECT tenant, day, sends FROM added
UNION ALL
SELECT u.tenant, u.day, u.sends FROM tenant_usage u JOIN today d ON d.tenant = u.tenant AND d.day = u.day
WHERE u.tenant NOT IN (SELECT tenant FROM added)
