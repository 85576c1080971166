-- The partitions of %(table)s that have no index attached to %(index)s yet (relkind 'p': a
-- partition that is itself partitioned, whose index is made ON ONLY it and attached in turn).
SELECT c.relname, c.relkind = 'p' AS partitioned
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = %(table)s::regclass
  AND NOT EXISTS (SELECT 1 FROM pg_inherits ii JOIN pg_index x ON x.indexrelid = ii.inhrelid
                  WHERE ii.inhparent = %(index)s::regclass AND x.indrelid = c.oid)
ORDER BY c.relname
