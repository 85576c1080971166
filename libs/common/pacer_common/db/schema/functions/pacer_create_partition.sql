-- Make p_parent's time partition for [p_starts, p_ends) (one that pacer_partitions_missing
-- listed), in the caller's transaction: 'created', or 'skipped' if a table it must lock is
-- locked past p_lock_timeout (left for the next call, never waited on with the table's
-- writers queued behind it), or no row if a partition holds any of the range by now (another
-- caller made it). Rows of the period that the default partition caught meanwhile are moved
-- into it (a partition cannot be attached over them), under the lock the ATTACH takes on the
-- default partition, so that no write of the period lands there in between: none while
-- partitions are made ahead as they should be. One caller at a time (an advisory lock, which
-- pacer_partition_writer shares).
--
-- The lock on the default partition is held to the end of the caller's transaction, and every
-- query that reads the table by anything but its partition key waits for it: a transaction
-- of its own for each partition, so that none is held while another table's lock is waited on.
CREATE OR REPLACE FUNCTION pacer_create_partition(p_parent text, p_starts timestamptz, p_ends timestamptz,
                                                  p_lock_timeout interval DEFAULT interval '2 seconds')
RETURNS TABLE (partition text, action text, detail text)
LANGUAGE plpgsql AS $fn$
DECLARE
    t partitioned_tables;
    lo text;
    hi text;
    name text;
    ddl text;
    moved bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('pacer_partitions'));
    PERFORM set_config('lock_timeout', (extract(epoch FROM p_lock_timeout) * 1000)::bigint::text, true);
    SELECT * INTO STRICT t FROM partitioned_tables WHERE parent = p_parent;
    IF EXISTS (SELECT 1 FROM pacer_partitions(p_parent) p WHERE p.starts < p_ends AND p.ends > p_starts) THEN
        RETURN;
    END IF;
    name := p_parent || '_p' || to_char(p_starts AT TIME ZONE 'UTC', 'YYYYMMDD');
    IF t.bound = 'item_id' THEN
        lo := quote_literal(pacer_uuid7_floor(p_starts));
        hi := quote_literal(pacer_uuid7_floor(p_ends));
    ELSE
        lo := quote_literal(p_starts);
        hi := quote_literal(p_ends);
    END IF;
    BEGIN
        -- The default partition locked before its rows are moved, as the ATTACH locks it
        -- (ACCESS EXCLUSIVE): a write of the period uncommitted during the move would otherwise
        -- stay behind in it, and the ATTACH's check of the default's rows fail on it. That lock
        -- at once, not a weaker one raised later: a session reading the default that then
        -- wrote to it would wait for this one while this one waited for its read (a deadlock).
        IF to_regclass(p_parent || '_default') IS NOT NULL THEN
            EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', p_parent || '_default');
        END IF;
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)',
                       name, p_parent);
        EXECUTE format('WITH m AS (DELETE FROM %1$I WHERE %2$I >= %3$s AND %2$I < %4$s RETURNING *) '
                       'INSERT INTO %5$I SELECT * FROM m', p_parent || '_default', t.key_column, lo, hi, name);
        GET DIAGNOSTICS moved = ROW_COUNT;
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', p_parent, name, lo, hi);
        FOREACH ddl IN ARRAY t.local_ddl LOOP
            EXECUTE format(ddl, name);
        END LOOP;
        RETURN QUERY SELECT name, 'created'::text,
            CASE WHEN moved > 0 THEN format('%s rows moved from the default partition', moved) END;
    EXCEPTION WHEN lock_not_available THEN
        RETURN QUERY SELECT name, 'skipped'::text, SQLERRM;
    END;
END
$fn$;
