-- Which of these names are not tenants.
SELECT n AS name FROM unnest(%(names)s::text[]) n WHERE NOT EXISTS (SELECT 1 FROM tenants t WHERE t.name = n)
ORDER BY n
