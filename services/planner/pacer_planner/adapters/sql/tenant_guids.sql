-- After ``tenant_guids_claim.sql``, in the same transaction: whether the tenant exists, the
-- job's guids another tenant holds (``foreign``, up to three, for the reason), and how many
-- guids the tenant now holds against its max_guids.
--
-- A statement of its own, so that under READ COMMITTED its snapshot is taken after the claim
-- returned: a guid that a concurrent job of the same tenant claimed first (the claim waited
-- for its commit, then did nothing) is seen as the tenant's, and counted. Asked in the claim's
-- own statement, it would be missing from that statement's older snapshot: called foreign
-- (the job refused) and left out of the count.
WITH t AS (
    SELECT name, max_guids FROM tenants WHERE name = %(tenant)s
)
SELECT EXISTS (SELECT 1 FROM t) AS known,
       (SELECT max_guids FROM t) AS max_guids,
       (SELECT count(*) FROM tenant_guids WHERE tenant = %(tenant)s) AS held,
       ARRAY(SELECT g FROM unnest(%(guids)s::text[]) g
             WHERE NOT EXISTS (SELECT 1 FROM tenant_guids m WHERE m.guid = g AND m.tenant = %(tenant)s)
             ORDER BY g LIMIT 3) AS foreign
