-- The audit log after a position, oldest first: what happened since the last look. A
-- position is the writing transaction's id and the entry's (`<xid>.<id>`). Ids are taken at
-- insert, not at commit, so in id order a transaction that commits late would be passed by a
-- reader already beyond its id. Here only entries of transactions older than every one still
-- running are read, in transactions' order: whatever commits later has a larger xid, so a
-- tail that goes on from the last position it read misses nothing. A plain id (no xid) starts
-- at that entry's position or, where it is gone, at the oldest transaction of the entries
-- after it.
WITH start AS (
    SELECT coalesce(%(xid)s::text::xid8,
                    (SELECT a.xid FROM audit_log a WHERE a.id = %(after)s::bigint),
                    (SELECT min(a.xid) FROM audit_log a WHERE a.id > %(after)s::bigint),
                    pg_snapshot_xmin(pg_current_snapshot())) AS xid,
           CASE WHEN %(xid)s::text::xid8 IS NOT NULL OR EXISTS (SELECT 1 FROM audit_log a WHERE a.id = %(after)s::bigint)
                THEN %(after)s::bigint ELSE 0 END AS id
)
SELECT a.id, a.at, a.actor, a.action, a.target_type, a.target_id, a.reason, a.before, a.after,
       a.xid::text || '.' || a.id AS position
FROM audit_log a, start s
WHERE (%(target_type)s::text IS NULL OR a.target_type = %(target_type)s::text)
  AND (%(target_id)s::text IS NULL OR a.target_id = %(target_id)s::text)
  AND (%(actor)s::text IS NULL OR a.actor = %(actor)s::text)
  AND (a.xid, a.id) > (s.xid, s.id)
  AND a.xid < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY a.xid, a.id
LIMIT %(limit)s
