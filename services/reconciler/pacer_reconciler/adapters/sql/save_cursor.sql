-- Advance the cursor from exactly where this batch started (optimistic concurrency): if it
-- is anywhere else, the batch was already applied or another reader moved it, and the
-- caller's transaction must roll back. A cursor that does not exist is made here only where
-- %(create)s (a tail that owns its cursor); a segment's cursor is made with its layout
-- (layout_create.sql), and once a layout of another count has removed it (layout_drop.sql)
-- a replica of the old count still running moves nothing: its batch rolls back.
WITH moved AS (
    UPDATE log_cursors SET last_xid = %(xid)s::xid8, last_seq = %(seq)s, updated_at = now()
    WHERE name = %(name)s AND last_xid = %(from_xid)s::xid8 AND last_seq = %(from_seq)s
    RETURNING 1
), made AS (
    INSERT INTO log_cursors (name, last_xid, last_seq, updated_at)
    SELECT %(name)s, %(xid)s::xid8, %(seq)s, now()
    WHERE %(create)s AND NOT EXISTS (SELECT 1 FROM log_cursors WHERE name = %(name)s)
    ON CONFLICT (name) DO NOTHING
    RETURNING 1
)
SELECT 1 FROM moved UNION ALL SELECT 1 FROM made
