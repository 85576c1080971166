-- A GRANT on a partitioned table reaches none of its partitions (and Postgres checks a
-- partition's own grants wherever it is named: ANALYZE, VACUUM, a query of the partition).
-- So each partition of every table in partitioned_tables is given the parent's grants that it
-- lacks ('granted'): a grant made on the parent reaches every partition, old and new, at the
-- next call. A grant is never revoked here; a partition this user may not grant on (it acts
-- for neither its owner nor a superuser) is left alone. One caller at a time (the partitions'
-- advisory lock); a GRANT takes no lock that a reader or writer of the table waits for.
CREATE OR REPLACE FUNCTION pacer_grant_partitions()
RETURNS TABLE (partition text, action text, detail text)
LANGUAGE plpgsql AS $fn$
DECLARE
    t record;
    g record;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('pacer_partitions'));
    FOR t IN SELECT * FROM partitioned_tables ORDER BY prune_order, parent LOOP
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
