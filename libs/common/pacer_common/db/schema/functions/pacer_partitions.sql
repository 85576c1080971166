-- The time partitions of a table in partitioned_tables (its default partition left out): each
-- one's name and the period of creation times it holds, [starts, ends), read from its bounds
-- (pacer_item_id_time for item ids). A partition is named <table>_p<YYYYMMDD>, the first day of
-- its period (UTC); the periods of a table need not be of one length: partitions made before a
-- change of period_days keep theirs.
CREATE OR REPLACE FUNCTION pacer_partitions(p_parent text)
RETURNS TABLE (partition text, starts timestamptz, ends timestamptz)
LANGUAGE sql STABLE AS $fn$
    SELECT c.relname::text,
           CASE t.bound WHEN 'item_id' THEN pacer_item_id_time(b[1]::uuid) ELSE b[1]::timestamptz END,
           CASE t.bound WHEN 'item_id' THEN pacer_item_id_time(b[2]::uuid) ELSE b[2]::timestamptz END
    FROM partitioned_tables t
    JOIN pg_inherits h ON h.inhparent = to_regclass(t.parent)
    JOIN pg_class c ON c.oid = h.inhrelid
    CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid), $re$FROM \('([^']+)'\) TO \('([^']+)'\)$re$) AS b
    WHERE t.parent = p_parent AND c.relname ~ ('^' || t.parent || '_p[0-9]{8}$')
    ORDER BY 2
$fn$;
