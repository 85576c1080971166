-- Each tenant with a daily quota: its sends of its today (pacer_tenant_day) and the quota,
-- for pacer_reconciler_tenant_sends_today and pacer_reconciler_tenant_sends_per_day.
SELECT t.name AS tenant, t.sends_per_day, COALESCE(u.sends, 0) AS sends
FROM tenants t
CROSS JOIN LATERAL pacer_tenant_day(t.timezone) d
LEFT JOIN tenant_usage u ON u.tenant = t.name AND u.day = d.day
WHERE t.sends_per_day IS NOT NULL
ORDER BY t.name
