-- One replica analyzes at a time; the others find the lock taken and leave it to that one.
-- An ANALYZE that would wait more than 2 s for its partition (autovacuum or DDL has it) is
-- skipped: whoever holds it is about to give the partition statistics, or will next run.
SELECT pg_try_advisory_xact_lock(hashtext('pacer_partition_stats')) AS locked,
       set_config('lock_timeout', '2s', true) IS NOT NULL AS timeout_set
