-- What a prune run has to do, in partitioned_tables' prune order: each time partition whose
-- period ended more than p_retain_days->>table days before p_now ('due'), and each default
-- partition that holds rows ('default'), which only an operator empties (docs/runbook.md,
-- "Retention"). A table missing from p_retain_days is kept whole. It drops nothing, and locks
-- nothing but what it reads: the caller hands each due partition, in this order, to
-- pacer_prune_partition, a transaction each, which drops it unless its table's guard keeps it.
--
-- Why not drop them here: a DROP holds its table's ACCESS EXCLUSIVE lock until commit. Dropped
-- in one transaction, the first items partition would hold every reader of items (a query by
-- guid reads every partition) through each later guard's scan and each later DROP's lock wait,
-- up to its lock timeout each. A transaction per partition holds a table only for that
-- partition's DROP. The order matters: an events or ledger partition is kept while the items of
-- its days are, so the items partitions go first, each committed before the next guard looks.
CREATE OR REPLACE FUNCTION pacer_partitions_due(p_now timestamptz, p_retain_days jsonb)
RETURNS TABLE (partition text, action text, detail text)
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    t record;
    filled boolean;
BEGIN
    FOR t IN SELECT * FROM partitioned_tables ORDER BY prune_order, parent LOOP
        IF to_regclass(t.parent || '_default') IS NOT NULL THEN
            EXECUTE format('SELECT EXISTS (SELECT FROM %I)', t.parent || '_default') INTO filled;
            IF filled THEN
                RETURN QUERY SELECT t.parent || '_default', 'default'::text, 'holds rows'::text;
            END IF;
        END IF;
        CONTINUE WHEN NOT p_retain_days ? t.parent;
        RETURN QUERY SELECT x.partition, 'due'::text, NULL::text FROM pacer_partitions(t.parent) x
                     WHERE x.ends + make_interval(secs => (p_retain_days->>t.parent)::int * 86400) <= p_now
                     ORDER BY x.starts;
    END LOOP;
END
$fn$;
