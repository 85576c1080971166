-- Create the time partitions of every table in partitioned_tables for the periods from the
-- day before p_now to p_ahead_days after it. Periods are cut by the table's period_days; a
-- part of a period that a partition made before a change of period_days already holds is
-- left to it, so that the partitions meet end to end whatever the periods were when each was
-- made (pacer_partitions reads their bounds). Rows of a new partition's period that the
-- default partition caught meanwhile are moved into it (a partition cannot be attached over
-- them), under the lock the ATTACH takes on the default partition, so that no write of the
-- period lands there in between: none while partitions are made ahead as they should be.
-- One caller at a time (an advisory lock); a partition whose table is locked past
-- lock_timeout is left for the next call ('skipped'), never waited on with the table's
-- writers queued behind it.
--
-- A GRANT on a partitioned table reaches none of its partitions (and Postgres checks a
-- partition's own grants wherever it is named: ANALYZE, VACUUM, a query of the partition).
-- So every call also gives each partition the parent's grants that it lacks ('granted'): a
-- grant made on the parent reaches every partition, old and new, at the next call. A grant
-- is never revoked here; a partition this user may not grant on (it acts for neither its
-- owner nor a superuser) is left alone.
CREATE OR REPLACE FUNCTION pacer_ensure_partitions(p_now timestamptz, p_ahead_days integer,
                                                   p_lock_timeout interval DEFAULT interval '2 seconds')
RETURNS TABLE (partition text, action text, detail text)
LANGUAGE plpgsql AS $fn$
DECLARE
    t record;
    d timestamptz;
    c timestamptz;
    upto timestamptz;
    held timestamptz;
    period interval;
    lo text;
    hi text;
    name text;
    ddl text;
    moved bigint;
    g record;
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
            c := d;
            WHILE c < d + period LOOP
                SELECT p.ends INTO held FROM pacer_partitions(t.parent) p WHERE p.starts <= c AND p.ends > c;
                IF held IS NOT NULL THEN  -- a partition holds c already: on from its end
                    c := held;
                    CONTINUE;
                END IF;
                SELECT COALESCE(min(p.starts), d + period) INTO upto
                FROM pacer_partitions(t.parent) p WHERE p.starts > c AND p.starts < d + period;
                name := t.parent || '_p' || to_char(c AT TIME ZONE 'UTC', 'YYYYMMDD');
                IF t.bound = 'item_id' THEN
                    lo := quote_literal(pacer_uuid7_floor(c));
                    hi := quote_literal(pacer_uuid7_floor(upto));
                ELSE
                    lo := quote_literal(c);
                    hi := quote_literal(upto);
                END IF;
                BEGIN
                    -- The default partition locked before its rows are moved, as the ATTACH
                    -- locks it (ACCESS EXCLUSIVE): a write of the period uncommitted during the
                    -- move would otherwise stay behind in it, and the ATTACH's check of the
                    -- default's rows fail on it. That lock at once, not a weaker one raised
                    -- later: a session reading the default that then wrote to it would wait
                    -- for this one while this one waited for its read (a deadlock).
                    IF to_regclass(t.parent || '_default') IS NOT NULL THEN
                        EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', t.parent || '_default');
                    END IF;
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
                c := upto;
            END LOOP;
            d := d + period;
        END LOOP;
        FOR g IN
            SELECT p.relname::text AS part, a.grantee, a.is_grantable,
                   string_agg(a.privilege_type, ', ' ORDER BY a.privilege_type) AS privileges
            FROM pg_inherits i
            JOIN pg_class par ON par.oid = i.inhparent
            JOIN pg_class p ON p.oid = i.inhrelid
            CROSS JOIN LATERAL aclexplode(par.relacl) a
            WHERE i.inhparent = to_regclass(t.parent)
              AND a.grantee <> p.relowner
              AND pg_has_role(p.relowner, 'USAGE')
              AND NOT EXISTS (SELECT 1 FROM aclexplode(p.relacl) b
                              WHERE b.grantee = a.grantee AND b.privilege_type = a.privilege_type
                                AND (b.is_grantable OR NOT a.is_grantable))
            GROUP BY p.relname, a.grantee, a.is_grantable
            ORDER BY p.relname, a.grantee
        LOOP
            EXECUTE format('GRANT %s ON %I TO %s%s', g.privileges, g.part,
                           CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(g.grantee)) END,
                           CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
            RETURN QUERY SELECT g.part, 'granted'::text,
                format('%s to %s%s, as on %s', g.privileges,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(g.grantee)::text END,
                       CASE WHEN g.is_grantable THEN ' with grant option' ELSE '' END, t.parent);
        END LOOP;
    END LOOP;
END
$fn$;
