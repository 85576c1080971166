-- The time partitions to make for the periods from the day before p_now to p_ahead_days
-- after it, table by table in partitioned_tables' order: each a parent and the bounds of its
-- new partition, none made here (pacer_create_partition makes each, in a transaction of its
-- own). Periods are cut by the table's period_days; a part of a period that a partition made
-- before a change of period_days already holds is left to it, so that the partitions meet
-- end to end whatever the periods were when each was made (pacer_partitions reads their
-- bounds).
CREATE OR REPLACE FUNCTION pacer_partitions_missing(p_now timestamptz, p_ahead_days integer)
RETURNS TABLE (parent text, starts timestamptz, ends timestamptz)
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    t record;
    d timestamptz;
    c timestamptz;
    upto timestamptz;
    held timestamptz;
    period interval;
BEGIN
    FOR t IN SELECT * FROM partitioned_tables ORDER BY prune_order, partitioned_tables.parent LOOP
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
                RETURN QUERY SELECT t.parent, c, upto;
                c := upto;
            END LOOP;
            d := d + period;
        END LOOP;
    END LOOP;
END
$fn$;
