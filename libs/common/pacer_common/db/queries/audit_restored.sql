-- Audit entries whose writing transaction this database has not reached yet: entries restored
-- from a logical backup (pg_dump), in a cluster whose transaction ids started again. They take
-- position 0, before everything written here, keeping their ids' order among themselves;
-- otherwise the audit tail would hold back everything written after the restore.
UPDATE audit_log SET xid = '0' WHERE xid >= pg_snapshot_xmax(pg_current_snapshot())
