-- A guid's limits overrides, locked until the transaction ends, read before a change to them
-- so the audit's "before" is what this change replaced: a concurrent change (here or by
-- `pacer limits`) waits for this one, or this one for it, never both reading the same before.
SELECT limits FROM guid_limits WHERE guid = %(guid)s FOR UPDATE
