-- A job's guids become its tenant's where no tenant holds them yet (a guid belongs to the first
-- tenant whose job names it); nothing is claimed for an unknown tenant. A guid another open
-- transaction is claiming waits for it to end: claimed here if it rolled back, left alone if
-- it committed. Whether the job may have them is ``tenant_guids.sql``'s question, asked next.
INSERT INTO tenant_guids (guid, tenant)
SELECT g, %(tenant)s FROM unnest(%(guids)s::text[]) g
WHERE EXISTS (SELECT 1 FROM tenants WHERE name = %(tenant)s)
ON CONFLICT (guid) DO NOTHING
