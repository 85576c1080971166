-- A tenant's row, locked until the transaction ends, before its audit's "before" is read: two
-- concurrent changes take turns, so each records what it replaced.
SELECT name FROM tenants WHERE name = %(name)s FOR UPDATE
