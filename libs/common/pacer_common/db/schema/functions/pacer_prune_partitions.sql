-- Drop the time partitions past their table's retention, in partitioned_tables' prune order:
-- a partition whose period ended more than p_retain_days->>table days before p_now goes,
-- unless the table's guard gives a reason to keep it (unfinished items, events a reconciler
-- has not applied, ledger keys whose items are still kept, reserved sends). Dropping a
-- partition is the only way rows leave: never DELETE. A table missing from p_retain_days is
-- kept whole. Rows: every partition past retention, dropped, kept with the reason, or skipped
-- (busy past p_lock_timeout); and a
-- default partition that holds rows ('default'), which only an operator empties
-- (docs/runbook.md, "Retention").
--
-- The guards read committed rows: a transaction that added an unfinished item to a partition
-- past retention and has not committed (an operator's retry of an old job's item, a requery
-- page of a long-lived job) would be invisible to them, and the DROP, queued behind it, would
-- take the new item with the partition. Such writers hold pacer_partition_writer()'s lock
-- shared, which this function holds alone from its start: it begins once they are done, and
-- they wait for it. No lock on the partitions is taken before the DROP: a query through the
-- parent (a generic plan locks every partition) would then wait for it while the DROP waits for
-- the parent. A DROP that still meets such a cycle, or waits past p_lock_timeout, is skipped.
CREATE OR REPLACE FUNCTION pacer_prune_partitions(p_now timestamptz, p_retain_days jsonb,
                                                  p_lock_timeout interval DEFAULT interval '2 seconds')
RETURNS TABLE (partition text, action text, detail text)
LANGUAGE plpgsql AS $fn$
DECLARE
    t record;
    p record;
    why text;
    filled boolean;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('pacer_partitions'));
    PERFORM set_config('lock_timeout', (extract(epoch FROM p_lock_timeout) * 1000)::bigint::text, true);
    FOR t IN SELECT * FROM partitioned_tables ORDER BY prune_order, parent LOOP
        IF to_regclass(t.parent || '_default') IS NOT NULL THEN
            EXECUTE format('SELECT EXISTS (SELECT FROM %I)', t.parent || '_default') INTO filled;
            IF filled THEN
                RETURN QUERY SELECT t.parent || '_default', 'default'::text, 'holds rows'::text;
            END IF;
        END IF;
        CONTINUE WHEN NOT p_retain_days ? t.parent;
        FOR p IN SELECT * FROM pacer_partitions(t.parent) x
                 WHERE x.ends + make_interval(secs => (p_retain_days->>t.parent)::int * 86400) <= p_now LOOP
            why := NULL;
            IF t.guard IS NOT NULL THEN
                EXECUTE format('SELECT string_agg(r, ''; '') FROM (' || t.guard || ') AS g(r)',
                               p.partition, p.starts, p.ends) INTO why;
            END IF;
            IF why IS NOT NULL THEN
                RETURN QUERY SELECT p.partition, 'kept'::text, why;
                CONTINUE;
            END IF;
            BEGIN
                EXECUTE format('DROP TABLE %I', p.partition);
                RETURN QUERY SELECT p.partition, 'dropped'::text, NULL::text;
            EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
                RETURN QUERY SELECT p.partition, 'skipped'::text, SQLERRM;
            END;
        END LOOP;
    END LOOP;
END
$fn$;
