-- Where a segment with nothing left to read may move its cursor: just before the oldest
-- transaction still running (every older one has finished, so no event of theirs can still
-- appear), when that is ahead of the cursor and no event of the segment lies between. One
-- statement, one snapshot, for both. A quiet segment's cursor otherwise stays at its last
-- event, and the prune keeps every event partition newer than the oldest cursor
-- (partitioned_tables' guard for item_events): the log would grow for ever.
WITH h AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin)
SELECT (h.xmin::text::numeric - 1)::text AS xid
FROM h
WHERE h.xmin::text::numeric - 1 > %(xid)s::text::numeric
  AND NOT EXISTS (
      SELECT 1 FROM item_events
      WHERE {guid_segment} >= %(segment)s AND {guid_segment} <= %(segment)s
        AND (item_events.xid, item_events.seq) > (%(xid)s::text::xid8, %(seq)s::bigint)
        AND item_events.xid < h.xmin)
