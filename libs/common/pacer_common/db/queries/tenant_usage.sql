-- Add one sender's sends per tenant to each tenant's today, then read every tenant's today
-- back: its date, the epoch second it ends, and its sends from all senders so far
-- (pacer_tenant_day: the tenant's time zone, else this sender's pacer.timezone). %(tenants)s
-- and %(sends)s are parallel arrays (possibly empty).
WITH today AS (
    SELECT t.name AS tenant, d.day, d.ends_at FROM tenants t CROSS JOIN LATERAL pacer_tenant_day(t.timezone) d
), added AS (
    INSERT INTO tenant_usage AS u (tenant, day, sends)
    SELECT x.t, d.day, x.n FROM unnest(%(tenants)s::text[], %(sends)s::bigint[]) AS x(t, n)
    JOIN today d ON d.tenant = x.t
    ON CONFLICT (tenant, day) DO UPDATE SET sends = u.sends + EXCLUDED.sends
    RETURNING u.tenant, u.sends
)
SELECT d.tenant, d.day, extract(epoch FROM d.ends_at)::float8 AS ends_at,
       COALESCE(a.sends, u.sends, 0) AS sends
FROM today d
LEFT JOIN added a ON a.tenant = d.tenant
LEFT JOIN tenant_usage u ON u.tenant = d.tenant AND u.day = d.day
ORDER BY d.tenant
