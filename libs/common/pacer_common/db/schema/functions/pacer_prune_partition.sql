-- Drop one time partition past its table's retention (pacer_partitions_due lists them, in
-- the order to drop them), unless its table's guard gives a reason to keep it (unfinished
-- items, events a reconciler has not applied, ledger keys whose items are still kept, reserved
-- sends). Dropping a partition is the only way rows leave: never DELETE. Call it in a
-- transaction of its own that does nothing else: the DROP holds its table's ACCESS EXCLUSIVE
-- lock until commit, and every reader of the table (a query by guid reads every partition)
-- waits until then. One row: dropped, kept with the reason, or skipped (busy past
-- p_lock_timeout); none if it is no longer a partition past retention of a table in
-- p_retain_days (another replica dropped it).
--
-- The guard reads committed rows: a transaction that added an unfinished item to a partition
-- past retention and has not committed (an operator's retry of an old job's item, a requery
-- page of a long-lived job) would be invisible to it, and the DROP, queued behind it, would
-- take the new item with the partition. Such writers hold pacer_partition_writer()'s lock
-- shared, which this function takes alone first, with no lock timeout: it goes on once they
-- are done, and they wait for it. No lock on the partition is taken before the DROP: a query
-- through the parent (a generic plan locks every partition) would then wait for it while the
-- DROP waits for the parent. A DROP that still meets such a cycle, or waits past
-- p_lock_timeout, is skipped.
CREATE OR REPLACE FUNCTION pacer_prune_partition(p_partition text, p_now timestamptz, p_retain_days jsonb,
                                                 p_lock_timeout interval DEFAULT interval '2 seconds')
RETURNS TABLE (partition text, action text, detail text)
LANGUAGE plpgsql AS $fn$
DECLARE
    p record;
    why text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('pacer_partitions'));
    PERFORM set_config('lock_timeout', (extract(epoch FROM p_lock_timeout) * 1000)::bigint::text, true);
    -- Past retention as pacer_partitions_due lists it, read again under the lock.
    SELECT t.guard, x.starts, x.ends INTO p
    FROM partitioned_tables t CROSS JOIN LATERAL pacer_partitions(t.parent) x
    WHERE x.partition = p_partition AND p_retain_days ? t.parent
      AND x.ends + make_interval(secs => (p_retain_days->>t.parent)::int * 86400) <= p_now;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p.guard IS NOT NULL THEN
        EXECUTE format('SELECT string_agg(r, ''; '') FROM (' || p.guard || ') AS g(r)',
                       p_partition, p.starts, p.ends) INTO why;
    END IF;
    IF why IS NOT NULL THEN
        RETURN QUERY SELECT p_partition, 'kept'::text, why;
        RETURN;
    END IF;
    BEGIN
        EXECUTE format('DROP TABLE %I', p_partition);
        RETURN QUERY SELECT p_partition, 'dropped'::text, NULL::text;
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        RETURN QUERY SELECT p_partition, 'skipped'::text, SQLERRM;
    END;
END
$fn$;
