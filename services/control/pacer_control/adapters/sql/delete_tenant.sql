-- Delete a tenant that no job names (its guids are freed, its daily send counts go with it);
-- ``jobs`` counts the ones that do. A job stored meanwhile fails the delete (foreign key: 409).
WITH t AS (
    SELECT name FROM tenants WHERE name = %(name)s FOR UPDATE
), n AS (
    SELECT count(*) AS jobs FROM jobs WHERE tenant = %(name)s
), freed AS (
    DELETE FROM tenant_guids WHERE tenant = %(name)s AND (SELECT jobs FROM n) = 0
), usage AS (
    DELETE FROM tenant_usage WHERE tenant = %(name)s AND (SELECT jobs FROM n) = 0
), gone AS (
    DELETE FROM tenants WHERE name IN (SELECT name FROM t) AND (SELECT jobs FROM n) = 0 RETURNING name
)
SELECT t.name, (SELECT jobs FROM n) AS jobs, EXISTS (SELECT 1 FROM gone) AS deleted FROM t
