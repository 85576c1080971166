-- A job's bulk operations (retries, cancels) take turns: a transaction-scoped advisory lock
-- on the job (key space 'pacr'), not its row. Retries write their shards' rows and then the
-- job's, the reconciler's order; holding the job's row from the start would invert it (a
-- deadlock with a segment holding a shard on its way to the job's row).
SELECT job_id, pg_advisory_xact_lock(1885430642, hashtext(job_id::text)) FROM jobs WHERE job_id = %(job)s::uuid
