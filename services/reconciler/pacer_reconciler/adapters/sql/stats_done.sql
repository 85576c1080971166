-- Whether a partition's statistics count its rows now (ANALYZE skips, with a warning, a
-- table the user may not analyze): the negation of stats_candidates.sql's condition.
SELECT NOT (c.reltuples < 0 OR (c.reltuples = 0 AND pg_stat_get_live_tuples(c.oid) > 0)) AS done
FROM pg_class c WHERE c.oid = to_regclass(%(partition)s)
