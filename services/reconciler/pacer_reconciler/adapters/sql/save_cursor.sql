INSERT INTO log_cursors (name, last_xid, last_seq, updated_at)
VALUES (%(name)s, %(xid)s::xid8, %(seq)s, now())
ON CONFLICT (name) DO UPDATE SET last_xid = EXCLUDED.last_xid, last_seq = EXCLUDED.last_seq, updated_at = now()
