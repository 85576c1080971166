-- The cursors of a new layout, all at the position every old cursor has reached.
INSERT INTO log_cursors (name, last_xid, last_seq)
SELECT name, %(xid)s::xid8, %(seq)s::bigint FROM unnest(%(names)s::text[]) AS u(name)
ON CONFLICT (name) DO NOTHING
