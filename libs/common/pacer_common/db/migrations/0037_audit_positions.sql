-- The audit log's tail (GET /audit?after=) reads in the order of the transactions that wrote
-- it: an entry's id is taken at insert, not at commit, so in id order a transaction that
-- commits late is passed by a reader already beyond its id. Entries written before this
-- migration share the position 0 and keep their ids' order among themselves. No table is
-- rewritten: the constant default is the old rows' value, the new one each insert's. The
-- index (xid, id) is built online (db/schema/indexes/audit_log_tail.sql).
ALTER TABLE audit_log ADD COLUMN xid xid8 NOT NULL DEFAULT '0';
ALTER TABLE audit_log ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
