-- Time partitions never analyzed (pg_class.reltuples < 0: no ANALYZE or VACUUM has run on
-- them): the planner plans every statement on them without statistics until autovacuum
-- reaches them. From the catalog alone, so that no lock is needed (sizes: stats_size.sql).
SELECT t.parent, c.relname::text AS partition
FROM partitioned_tables t
JOIN pg_inherits h ON h.inhparent = to_regclass(t.parent)
JOIN pg_class c ON c.oid = h.inhrelid
WHERE c.reltuples < 0
ORDER BY partition
