-- Pacer's copy of a customer, written only if this version is newer than the one held (an
-- equal or older one, read by a concurrent or late sync, changes nothing). The row lock of
-- the conflicting insert orders concurrent syncs of one customer. ``written``: this version,
-- or NULL when refused (then customer_version.sql reads the version that refused it).
WITH w AS (
    INSERT INTO customers AS c (customer_id, name, remark, tags, version, synced_by)
    VALUES (%(id)s, %(name)s, %(remark)s, %(tags)s, %(version)s, %(item)s::uuid)
    ON CONFLICT (customer_id) DO UPDATE SET name = EXCLUDED.name, remark = EXCLUDED.remark, tags = EXCLUDED.tags,
        version = EXCLUDED.version, synced_at = now(), synced_by = EXCLUDED.synced_by, writes = c.writes + 1
    WHERE c.version < EXCLUDED.version
    RETURNING version
)
SELECT (SELECT version FROM w) AS written
