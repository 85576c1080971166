-- Whether a job has an item still open: waiting to be sent, in flight or in doubt. A job (or a
-- shard) taken off hold with none left is completed there and then (resume, approval): the
-- reconciler completes one only when an event of its moves, and none would come.
CREATE OR REPLACE FUNCTION pacer_job_open(p_job uuid, p_shard bigint DEFAULT NULL)
RETURNS boolean
LANGUAGE sql STABLE AS $fn$
    SELECT EXISTS (
        SELECT 1 FROM items i
        WHERE i.job_id = p_job AND (p_shard IS NULL OR i.shard_id = p_shard)
          AND i.status IN ('pending', 'claimed', 'submitted', 'waiting_retry', 'recovery_pending'))
$fn$;
