-- A job's pages take turns with each other and with the job's bulk retries and cancels: a
-- transaction-scoped advisory lock on the job (key space 'pacr', the Control API's
-- lock_job.sql), not its row. A page writes its shards' counts and rows and only then the
-- job's row, the reconciler's order (apply_counts, refresh_shards, lock_jobs): holding the
-- job's row from the start would invert it (a deadlock with a segment holding a shard the
-- page adds to, on its way to the job's row).
SELECT pg_advisory_xact_lock(1885430642, hashtext(%(job_id)s::uuid::text))
