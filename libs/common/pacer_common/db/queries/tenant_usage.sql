-- Add one sender's sends per tenant to today's (UTC) totals, then read every tenant's total of
-- today back. %(tenants)s and %(sends)s are parallel arrays (possibly empty).
WITH added AS (
    INSERT INTO tenant_usage AS u (tenant, day, sends)
    SELECT t, (now() AT TIME ZONE 'UTC')::date, n FROM unnest(%(tenants)s::text[], %(sends)s::bigint[]) AS x(t, n)
    ON CONFLICT (tenant, day) DO UPDATE SET sends = u.sends + EXCLUDED.sends
    RETURNING u.tenant, u.sends
)
SELECT (now() AT TIME ZONE 'UTC')::date AS day, tenant, sends FROM added
UNION ALL
SELECT (now() AT TIME ZONE 'UTC')::date, u.tenant, u.sends FROM tenant_usage u
WHERE u.day = (now() AT TIME ZONE 'UTC')::date AND u.tenant NOT IN (SELECT tenant FROM added)
