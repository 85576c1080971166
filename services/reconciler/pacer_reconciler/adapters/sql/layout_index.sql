-- Whether the event index of a segment count is there and valid (the tail reads through it;
-- one being built online, pacer migrate --event-segments, is there but not yet valid).
SELECT EXISTS (SELECT 1 FROM pg_index x
               WHERE x.indexrelid = to_regclass(%(name)s) AND x.indisvalid) AS present
