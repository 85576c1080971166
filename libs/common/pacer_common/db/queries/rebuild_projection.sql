-- Rebuild the reconciler's projection (shard_status_counts, shard and job completion) from
-- the items table, and move the reconciler's log cursors (the single leader's and every
-- segment's) to the end of the event log, so no
-- event is applied on top of counts that already include it. For repair after a defect that
-- applied events twice or skipped them. Nothing may be writing events meanwhile: run it
-- with the planner, the senders and the reconciler stopped (`pacer rebuild-projection`).
LOCK TABLE log_cursors, shard_status_counts IN EXCLUSIVE MODE;

DELETE FROM shard_status_counts;

INSERT INTO shard_status_counts (shard_id, status, n)
SELECT shard_id, status, count(*) FROM items GROUP BY shard_id, status;

UPDATE log_cursors c
SET last_xid = e.xid, last_seq = e.seq, updated_at = now()
FROM (SELECT item_events.xid, item_events.seq FROM item_events
      ORDER BY item_events.xid DESC, item_events.seq DESC LIMIT 1) AS e
WHERE c.name = 'reconciler' OR c.name LIKE 'reconciler/%';

WITH open_counts AS (
    SELECT s.shard_id, COALESCE(sum(c.n) FILTER (WHERE c.status IN ('pending', 'claimed', 'submitted',
                                                                      'waiting_retry', 'recovery_pending')), 0) AS open_n
    FROM shards s LEFT JOIN shard_status_counts c ON c.shard_id = s.shard_id
    GROUP BY s.shard_id
)
UPDATE shards s
SET status = CASE WHEN o.open_n = 0 THEN 'completed' ELSE 'running' END
FROM open_counts o
WHERE s.shard_id = o.shard_id
  AND ((o.open_n = 0 AND s.status IN ('pending', 'running'))
       OR (o.open_n > 0 AND s.status = 'completed'));

UPDATE jobs j
SET status = CASE WHEN d.all_done THEN 'completed' ELSE 'running' END,
    finished_at = CASE WHEN d.all_done THEN COALESCE(j.finished_at, now()) ELSE NULL END
FROM (SELECT job_id, bool_and(status = 'completed') AS all_done FROM shards GROUP BY job_id) AS d
WHERE j.job_id = d.job_id AND j.status IN ('running', 'completed')
  AND (j.status = 'completed') IS DISTINCT FROM d.all_done;
