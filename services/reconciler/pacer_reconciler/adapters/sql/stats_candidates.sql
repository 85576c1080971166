-- Time partitions never analyzed (pg_class.reltuples < 0: no ANALYZE or VACUUM has run on
-- them) that already hold at least %(min_bytes)s: the planner plans every statement on them
-- without statistics until autovacuum reaches them. Largest first.
SELECT t.parent, c.relname::text AS partition, pg_relation_size(c.oid) AS bytes
FROM partitioned_tables t
JOIN pg_inherits h ON h.inhparent = to_regclass(t.parent)
JOIN pg_class c ON c.oid = h.inhrelid
WHERE c.reltuples < 0 AND pg_relation_size(c.oid) >= %(min_bytes)s
ORDER BY bytes DESC, partition
