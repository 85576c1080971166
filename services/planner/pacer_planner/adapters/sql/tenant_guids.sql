-- A job's tenant and guids, checked and recorded before the job is stored (same transaction):
-- whether the tenant exists, the guids it newly claims (a guid belongs to the first tenant
-- whose job names it), guids another tenant holds (``foreign``, up to three, for the reason),
-- and how many guids the tenant holds with these against its max_guids.
WITH t AS (
    SELECT name, max_guids FROM tenants WHERE name = %(tenant)s
), claimed AS (
    INSERT INTO tenant_guids (guid, tenant)
    SELECT g, %(tenant)s FROM unnest(%(guids)s::text[]) g WHERE EXISTS (SELECT 1 FROM t)
    ON CONFLICT (guid) DO NOTHING
    RETURNING guid
), theirs AS (
    -- Neither claimed now nor already ours: another tenant's (claims made by concurrent
    -- transactions are not visible to this statement, and land here too).
    SELECT g AS guid FROM unnest(%(guids)s::text[]) g
    WHERE g NOT IN (SELECT guid FROM claimed)
      AND NOT EXISTS (SELECT 1 FROM tenant_guids m WHERE m.guid = g AND m.tenant = %(tenant)s)
)
SELECT EXISTS (SELECT 1 FROM t) AS known,
       (SELECT max_guids FROM t) AS max_guids,
       (SELECT count(*) FROM tenant_guids WHERE tenant = %(tenant)s) + (SELECT count(*) FROM claimed) AS held,
       ARRAY(SELECT guid FROM theirs ORDER BY guid LIMIT 3) AS foreign
