-- Every partition past retention dropped (or kept, with why, or skipped), in the caller's one
-- transaction, as this function did before pruning went a transaction per partition: kept for
-- what still calls it by this name — a reconciler older than this schema (during a rolling
-- upgrade, or after a rollback, which leaves the functions as they are) and operators' scripts
-- — so that they go on pruning. The reconciler itself lists them (pacer_partitions_due) and
-- drops each in a transaction of its own (pacer_prune_partition), which holds a table's
-- readers only for that partition's DROP (pacer_partitions_due says why).
DROP FUNCTION IF EXISTS pacer_prune_partitions(timestamptz, jsonb);
CREATE OR REPLACE FUNCTION pacer_prune_partitions(p_now timestamptz, p_retain_days jsonb,
                                                  p_lock_timeout interval DEFAULT interval '2 seconds')
RETURNS TABLE (partition text, action text, detail text)
LANGUAGE plpgsql AS $fn$
DECLARE
    d record;
BEGIN
    FOR d IN SELECT * FROM pacer_partitions_due(p_now, p_retain_days) LOOP
        IF d.action = 'due' THEN
            RETURN QUERY SELECT * FROM pacer_prune_partition(d.partition, p_now, p_retain_days, p_lock_timeout);
        ELSE
            RETURN QUERY SELECT d.partition, d.action, d.detail;
        END IF;
    END LOOP;
END
$fn$;
