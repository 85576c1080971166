-- Audit entries restored from a logical backup (pg_dump) into a cluster whose transaction ids
-- started again: found by an entry whose transaction this cluster has not reached yet. Then
-- every entry's transaction id is another cluster's, so all take position 0 and keep their
-- ids' order; otherwise the audit tail would hold back, or pass, what is written from now on.
UPDATE audit_log SET xid = '0'
WHERE xid <> '0' AND EXISTS (SELECT 1 FROM audit_log r WHERE r.xid >= pg_snapshot_xmax(pg_current_snapshot()))
