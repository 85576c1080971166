-- Drop the time partitions past their table's retention, in partitioned_tables' prune order:
-- a partition whose period ended more than p_retain_days->>table days before p_now goes,
-- unless the table's guard gives a reason to keep it (unfinished items, events a reconciler
-- has not applied, ledger keys whose items are still kept, reserved sends). Dropping a
-- partition is the only way rows leave: never DELETE. A table missing from p_retain_days is
-- kept whole. Rows: every partition past retention, dropped, kept with the reason, or skipped
-- (busy past p_lock_timeout); and a default partition that holds rows ('default'), which only an
-- operator empties (docs/runbook.md, "Retention").
--
-- A guard that finds nothing decides a drop only under a lock that keeps the partition's
-- writers out: a transaction that added a row to it and has not committed (an operator's retry
-- of an old job's item lands in that job's partition) is invisible to the guard, and a DROP
-- queued behind it would go ahead once it commits, taking the new pending item with it. So the
-- partition is locked first (waiting for such a writer to end), and the guard runs again and
-- sees what it wrote. SHARE mode keeps writers out and lets readers in: ACCESS EXCLUSIVE on the
-- partition would deadlock with any query on the parent (a guid's queue reads every partition),
-- which holds the parent and waits for the partition while the DROP waits for the parent; and
-- locking the parent first, as DROP does, would stop every item read and write for the length
-- of the guard's scan. A writer of this very partition still forms such a cycle (it holds the
-- parent, waits for the partition); Postgres breaks it and nothing of the partition is lost
-- either way: here it is 'skipped', the writer's transaction is rolled back and retried.
-- A reason to keep needs no lock, so the guard runs once before it: a partition that stays
-- does not hold up its writers.
CREATE OR REPLACE FUNCTION pacer_prune_partitions(p_now timestamptz, p_retain_days jsonb,
                                                  p_lock_timeout interval DEFAULT interval '2 seconds')
RETURNS TABLE (partition text, action text, detail text)
LANGUAGE plpgsql AS $fn$
DECLARE
    t record;
    p record;
    why text;
    check_sql text;
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
                check_sql := format('SELECT string_agg(r, ''; '') FROM (' || t.guard || ') AS g(r)',
                                    p.partition, p.starts, p.ends);
                EXECUTE check_sql INTO why;
            END IF;
            IF why IS NOT NULL THEN
                RETURN QUERY SELECT p.partition, 'kept'::text, why;
                CONTINUE;
            END IF;
            BEGIN
                IF t.guard IS NOT NULL THEN  -- the guard again, with the partition's writers out
                    EXECUTE format('LOCK TABLE %I IN SHARE MODE', p.partition);
                    EXECUTE check_sql INTO why;
                END IF;
                IF why IS NULL THEN
                    EXECUTE format('DROP TABLE %I', p.partition);
                END IF;
            EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
                RETURN QUERY SELECT p.partition, 'skipped'::text, SQLERRM;
                CONTINUE;
            END;
            RETURN QUERY SELECT p.partition, CASE WHEN why IS NULL THEN 'dropped' ELSE 'kept' END, why;
        END LOOP;
    END LOOP;
END
$fn$;
