-- One segment's events after its cursor whose transactions have all finished. The segment
-- expression, in the filter and first in the order, matches the index item_events_segment_<N>:
-- one range scan in the order asked for. It is written as a range, not "= segment": with an
-- equality the planner drops it from the order and may walk the whole log's position index
-- instead, throwing away 15 rows in 16 (measured in docs/performance.md). Transactions commit out of
-- sequence order, so reading "seq > last" could pass over an event that commits later;
-- taking only xid < the oldest running xid, in (xid, seq) order, never can.
-- The order names the table's columns: a bare "xid" would be the text alias below, and
-- '1000' sorts before '999'.
-- The job's tenant and trace context, which each outcome carries in its headers, are read once
-- per job (job_labels.sql), not here: a lookup per event was most of this statement's cost.
SELECT seq, xid::text AS xid, item_id::text AS item_id, job_id::text AS job_id, shard_id, guid,
       version, type, from_status::text AS from_status, to_status::text AS to_status,
       payload, occurred_at, restore_epoch
FROM item_events
WHERE {guid_segment} >= %(segment)s AND {guid_segment} <= %(segment)s
  AND (xid, seq) > (%(xid)s::xid8, %(seq)s::bigint)
  AND xid < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY {segment_order}item_events.xid, item_events.seq
LIMIT %(limit)s
