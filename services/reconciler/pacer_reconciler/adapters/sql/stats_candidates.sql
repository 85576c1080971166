-- Time partitions whose statistics are missing, or say they are empty while they hold rows:
-- never analyzed (pg_class.reltuples < 0: no ANALYZE or VACUUM has run on them), or analyzed
-- while still empty (reltuples = 0: an ANALYZE of the whole database reaches the empty
-- partitions of the days ahead) with live rows since (the cumulative statistics count them
-- without any ANALYZE). Until autovacuum reaches them, the planner plans every statement on
-- them as if they were (nearly) empty. From the catalog alone, so that no lock is needed
-- (sizes: stats_size.sql).
SELECT t.parent, c.relname::text AS partition
FROM partitioned_tables t
JOIN pg_inherits h ON h.inhparent = to_regclass(t.parent)
JOIN pg_class c ON c.oid = h.inhrelid
WHERE c.reltuples < 0 OR (c.reltuples = 0 AND pg_stat_get_live_tuples(c.oid) > 0)
ORDER BY partition
