-- Create the time partitions of every table in partitioned_tables for the periods from the
-- day before p_now to p_ahead_days after it. Rows of a new partition's period that the
-- default partition caught meanwhile are moved into it (a partition cannot be attached over
-- them): none while partitions are made ahead as they should be. One caller at a time (an
-- advisory lock); a partition whose table is locked past lock_timeout is left for the next
-- call ('skipped'), never waited on with the table's writers queued behind it.
CREATE OR REPLACE FUNCTION pacer_ensure_partitions(p_now timestamptz, p_ahead_days integer,
                                                   p_lock_timeout interval DEFAULT interval '2 seconds')
RETURNS TABLE (partition text, action text, detail text)
LANGUAGE plpgsql AS $fn$
DECLARE
    t record;
    d timestamptz;
    period interval;
    lo text;
    hi text;
    name text;
    ddl text;
    moved bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('pacer_partitions'));
    PERFORM set_config('lock_timeout', (extract(epoch FROM p_lock_timeout) * 1000)::bigint::text, true);
    FOR t IN SELECT * FROM partitioned_tables ORDER BY prune_order, parent LOOP
        -- Periods are whole UTC days from the epoch; in seconds, so that no session time zone's
        -- daylight saving moves a boundary.
        period := make_interval(secs => t.period_days * 86400);
        d := to_timestamp((floor((floor(extract(epoch FROM p_now) / 86400) - 1) / t.period_days)
                           * t.period_days * 86400)::bigint);
        WHILE d <= p_now + make_interval(secs => p_ahead_days * 86400) LOOP
            name := t.parent || '_p' || to_char(d AT TIME ZONE 'UTC', 'YYYYMMDD');
            IF to_regclass(name) IS NULL THEN
                IF t.bound = 'item_id' THEN
                    lo := quote_literal(pacer_uuid7_floor(d));
                    hi := quote_literal(pacer_uuid7_floor(d + period));
                ELSE
                    lo := quote_literal(d);
                    hi := quote_literal(d + period);
                END IF;
                BEGIN
                    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)',
                                   name, t.parent);
                    EXECUTE format('WITH m AS (DELETE FROM %1$I WHERE %2$I >= %3$s AND %2$I < %4$s RETURNING *) '
                                   'INSERT INTO %5$I SELECT * FROM m', t.parent || '_default', t.key_column,
                                   lo, hi, name);
                    GET DIAGNOSTICS moved = ROW_COUNT;
                    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)',
                                   t.parent, name, lo, hi);
                    FOREACH ddl IN ARRAY t.local_ddl LOOP
                        EXECUTE format(ddl, name);
                    END LOOP;
                    RETURN QUERY SELECT name, 'created'::text,
                        CASE WHEN moved > 0 THEN format('%s rows moved from the default partition', moved) END;
                EXCEPTION WHEN lock_not_available THEN
                    RETURN QUERY SELECT name, 'skipped'::text, SQLERRM;
                END;
            END IF;
            d := d + period;
        END LOOP;
    END LOOP;
END
$fn$;
