-- How long the first event the tails cannot read yet has waited. It is committed, but at or
-- past the oldest transaction still running on the server, and a tail reads only below that
-- one (read_events.sql). The horizon is the whole server's: an open transaction in any of
-- its databases that has written anything holds every tail back until it ends. 0 when no
-- event waits. The first in read order, by the log's position index: one probe per partition.
SELECT coalesce(extract(epoch FROM clock_timestamp() - min(occurred_at)), 0)::float8 AS held_back_s
FROM (SELECT occurred_at FROM item_events
      WHERE xid >= pg_snapshot_xmin(pg_current_snapshot())
      ORDER BY xid, seq
      LIMIT 1) AS first_held
