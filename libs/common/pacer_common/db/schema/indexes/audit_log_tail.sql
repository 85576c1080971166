-- The audit log in transactions' order: the tail (GET /audit?after=<xid>.<id>) reads it from
-- a position on (services/control/pacer_control/adapters/sql/audit_after.sql).
CREATE INDEX audit_log_tail ON audit_log (xid, id);
