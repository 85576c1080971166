-- Tenants without their secrets: whether each is set, how many guids each holds, and its sends
-- of its today, the day its quota counts (pacer_tenant_day).
SELECT t.name, t.base_url, t.credential IS NOT NULL AS has_credential,
       t.callback_secret IS NOT NULL AS has_callback_secret, t.sends_per_day, t.max_guids, t.timezone,
       (SELECT count(*) FROM tenant_guids g WHERE g.tenant = t.name) AS guids,
       COALESCE(u.sends, 0) AS sends_today, t.created_at, t.updated_at
FROM tenants t
CROSS JOIN LATERAL pacer_tenant_day(t.timezone) d
LEFT JOIN tenant_usage u ON u.tenant = t.name AND u.day = d.day
WHERE %(name)s::text IS NULL OR t.name = %(name)s::text
ORDER BY t.name
