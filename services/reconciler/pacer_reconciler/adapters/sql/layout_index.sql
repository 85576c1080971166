-- Whether the event index of a segment count exists (the tail reads through it).
SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE tablename = 'item_events' AND indexname = %(name)s) AS present
