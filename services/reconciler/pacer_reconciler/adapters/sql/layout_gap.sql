-- Whether a segment of an old layout has events between its cursor and the new layout's start
-- (then starting there would skip them).
SELECT EXISTS (
    SELECT 1 FROM item_events
    WHERE (xid, seq) > (%(from_xid)s::xid8, %(from_seq)s::bigint)
      AND (xid, seq) <= (%(to_xid)s::xid8, %(to_seq)s::bigint)
      AND {guid_segment} = %(segment)s
) AS gap
