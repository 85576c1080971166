-- Advance the cursor from exactly where this batch started (optimistic concurrency): if it
-- is anywhere else, the batch was already applied or another reader moved it, and the
-- caller's transaction must roll back.
INSERT INTO log_cursors AS c (name, last_xid, last_seq, updated_at)
VALUES (%(name)s, %(xid)s::xid8, %(seq)s, now())
ON CONFLICT (name) DO UPDATE SET last_xid = EXCLUDED.last_xid, last_seq = EXCLUDED.last_seq, updated_at = now()
WHERE c.last_xid = %(from_xid)s::xid8 AND c.last_seq = %(from_seq)s
RETURNING 1
