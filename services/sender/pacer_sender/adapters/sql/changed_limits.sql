-- Limit changes in commit order: those of transactions older than the oldest one still
-- running, past the last transaction id read (as the reconciler reads the event log). An
-- "updated_at > last seen" poll would skip a change committed after a later-stamped one.
SELECT guid, limits, change_xid::text::bigint AS cursor
FROM guid_limits
WHERE change_xid > %(after)s::text::xid8
  AND change_xid < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY change_xid, guid
