-- The time partitions of a table in partitioned_tables (its default partition left out): each
-- one's name and the period of creation times it holds, [starts, ends). A partition is named
-- <table>_p<YYYYMMDD>, the first day of its period (UTC).
CREATE OR REPLACE FUNCTION pacer_partitions(p_parent text)
RETURNS TABLE (partition text, starts timestamptz, ends timestamptz)
LANGUAGE sql STABLE AS $fn$
    SELECT p.relname, p.d, p.d + make_interval(secs => p.period_days * 86400)
    FROM (SELECT c.relname::text AS relname, t.period_days,
                 CASE WHEN c.relname ~ ('^' || t.parent || '_p[0-9]{8}$')
                      THEN to_date(right(c.relname, 8), 'YYYYMMDD')::timestamp AT TIME ZONE 'UTC' END AS d
          FROM partitioned_tables t
          JOIN pg_inherits h ON h.inhparent = to_regclass(t.parent)
          JOIN pg_class c ON c.oid = h.inhrelid
          WHERE t.parent = p_parent) AS p
    WHERE p.d IS NOT NULL
    ORDER BY p.d
$fn$;
