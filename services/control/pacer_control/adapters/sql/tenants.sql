-- Tenants without their secrets: whether each is set, and how many guids each holds.
SELECT t.name, t.base_url, t.credential IS NOT NULL AS has_credential,
       t.callback_secret IS NOT NULL AS has_callback_secret, t.sends_per_day, t.max_guids, t.timezone,
       (SELECT count(*) FROM tenant_guids g WHERE g.tenant = t.name) AS guids, t.created_at, t.updated_at
FROM tenants t
WHERE %(name)s::text IS NULL OR t.name = %(name)s::text
ORDER BY t.name
