-- Shedding: the ready batch items of one guid that cannot go out before their expire_at at
-- the guid's pace. Each item's position is its place in the guid's send order (the order of
-- next_ready.sql: priority, fair share across jobs by weight, age), so the item at position p
-- goes out at about now + p × %(interval_s)s, plus, over the first %(sends)s sends, what a
-- rate-limit penalty of %(penalty)s adds while clean sends wear it down by %(decay)s each
-- (domain/pacing.py ``Drain.at``, domain/order.py ``sheds``).
-- Reads the guid's whole batch queue (items_guid_ready, by index): run once in a while per
-- guid, not per send.
WITH q AS (
    SELECT item_id, job_id, priority, expire_at, COALESCE(not_before, created_at) AS ready_at,
           row_number() OVER (PARTITION BY priority, job_id
                              ORDER BY COALESCE(not_before, created_at), item_id) - 1 AS k
    FROM items
    WHERE guid = %(guid)s AND status = 'pending' AND NOT held AND priority >= %(min_priority)s
      AND COALESCE(not_before, created_at) <= now()
), w AS (
    SELECT j.job_id, greatest(COALESCE((l.limits ->> 'weight')::float8, 1.0), 0.001) AS weight
    FROM (SELECT DISTINCT job_id FROM q) j
    LEFT JOIN guid_limits l ON l.guid = 'job:' || j.job_id::text
), ordered AS (
    SELECT q.item_id, q.expire_at,
           row_number() OVER (ORDER BY q.priority, q.k / w.weight, q.ready_at, q.item_id) AS pos
    FROM q JOIN w USING (job_id)
)
SELECT item_id::text AS item_id, pos, expire_at
FROM ordered
WHERE expire_at IS NOT NULL
  AND now() + make_interval(secs => pos * %(interval_s)s + %(base_s)s * (
        %(penalty)s * (1 - power(%(decay)s, least(pos, %(sends)s))) / (1 - %(decay)s) - least(pos, %(sends)s)))
      > expire_at
