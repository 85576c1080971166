SELECT last_xid::text AS xid, last_seq FROM log_cursors WHERE name = %(name)s
