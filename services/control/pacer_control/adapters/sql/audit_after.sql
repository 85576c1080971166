-- The audit log after a position, oldest first: what happened since the last look. A
-- position is the writing transaction's id and the entry's (`<xid>.<id>`). Ids are taken at
-- insert, not at commit, so in id order a transaction that commits late would be passed by a
-- reader already beyond its id. Here only entries of transactions older than every one still
-- running are read, in transactions' order: whatever commits later has a larger xid, so a
-- tail that goes on from the last position it read misses nothing (a transaction held open
-- anywhere on the server holds it back meanwhile).
--
-- A plain id N (no xid) starts where no entry after N can be passed: at the oldest of N's
-- transaction, the transactions of the entries after N and the ones still running, right
-- after N where that is N's own (or 0: entries from before positions existed keep their ids'
-- order); entries before N may come again.
WITH n AS (
    SELECT (SELECT a.xid FROM audit_log a WHERE a.id = %(after)s::bigint) AS xid
), s0 AS (
    SELECT coalesce(%(xid)s::text::xid8,
                    least(n.xid, (SELECT min(a.xid) FROM audit_log a WHERE a.id > %(after)s::bigint),
                          pg_snapshot_xmin(pg_current_snapshot()))) AS xid, n.xid AS n_xid
    FROM n
), start AS (
    SELECT s0.xid, CASE WHEN %(xid)s::text IS NOT NULL OR s0.xid = '0'::xid8 OR s0.xid = s0.n_xid
                        THEN %(after)s::bigint ELSE 0 END AS id
    FROM s0
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
