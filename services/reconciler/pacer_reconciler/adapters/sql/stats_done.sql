-- Whether a partition has statistics now (ANALYZE skips, with a warning, a table the user
-- may not analyze).
SELECT c.reltuples >= 0 AS done FROM pg_class c WHERE c.oid = to_regclass(%(partition)s)
