-- The time partitions from the day before p_now to p_ahead_days after it made, and the
-- parents' grants given to every partition, in the caller's one transaction: kept for what
-- calls it by this name — a reconciler older than this schema (during a rolling upgrade, or
-- after a rollback) and operators' scripts. The reconciler and migrate list the partitions
-- to make (pacer_partitions_missing) and make each in a transaction of its own
-- (pacer_create_partition), which holds a table's default partition only for its own
-- partition's ATTACH, never through another table's lock wait; then pacer_grant_partitions.
CREATE OR REPLACE FUNCTION pacer_ensure_partitions(p_now timestamptz, p_ahead_days integer,
                                                   p_lock_timeout interval DEFAULT interval '2 seconds')
RETURNS TABLE (partition text, action text, detail text)
LANGUAGE plpgsql AS $fn$
DECLARE
    m record;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('pacer_partitions'));
    FOR m IN SELECT * FROM pacer_partitions_missing(p_now, p_ahead_days) LOOP
        RETURN QUERY SELECT * FROM pacer_create_partition(m.parent, m.starts, m.ends, p_lock_timeout);
    END LOOP;
    RETURN QUERY SELECT * FROM pacer_grant_partitions();
END
$fn$;
