DELETE FROM log_cursors WHERE name = ANY(%(names)s::text[])
