-- The reconciler's work is split into segments by guid hash: segment = (hashtext(guid) &
-- 2147483647) % N, N = PACER_RECONCILER_SEGMENTS. Each replica tails only its segments'
-- events; this index makes that read a range scan per segment. Its expression names the
-- default N = 16: another N needs its own index, item_events_segment_<N> (docs/reliability.md,
-- "Changing the segment count"); without it the tail still works, by a slower scan.
CREATE INDEX item_events_segment_16 ON item_events (((hashtext(guid) & 2147483647) % 16), xid, seq);
