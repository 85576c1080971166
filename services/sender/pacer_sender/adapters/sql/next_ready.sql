-- The next ready items of one guid, chosen among ALL of its ready work in Postgres, to fill
-- its sender's in-memory window; and when its earliest scheduled item comes due. The one
-- place that decides which of a guid's queued items go next (domain/order.py states the
-- same rule in Python; an integration test keeps the two equal):
--
--   1. priority (the online lane's priorities come before the batch lane's);
--   2. within a priority, fair share across jobs: start-time fair queuing over each job's
--      ready items, the k-th (from 0) of job J starting at virtual time k / weight(J) —
--      a job's weight is the ``weight`` field of its ``job:<id>`` row in guid_limits
--      (hot-adjustable, default 1), so jobs of equal weight take turns, one of weight 2
--      sends two for one;
--   3. then the moment an item became ready (its not_before, else its creation), then id.
--
-- Ready: pending, not held, due (no not_before, or past it), not already in the window; and
-- nothing at all while the guid's lifecycle state is not `online` (offline, kicked,
-- unauthorized hold its whole queue, at any depth: the anchor below finds no pair).
-- Cost at any depth: a loose scan of items_guid_ready finds the guid's (priority, job)
-- pairs with one probe each, then at most %(limit)s index entries per pair are read; a
-- scheduled item sorts after its job's ready ones, so each range stops at the first not
-- yet due. ``due_in_s`` (seconds until the earliest scheduled item, NULL if none) is one
-- more probe per pair. The statement always returns one row at least (item_id NULL when
-- nothing is ready), carrying due_in_s.
--
-- That cost holds only when every range is read in the order of items_guid_ready; the
-- adapter runs this with sorts and bitmap scans off (queue.NEXT_READY_SETTINGS), since the
-- planner, misled by statistics that predate a guid's or job's rows, would otherwise pick
-- items_guid_queued or items_job_status and read (and sort) the whole guid or job.
WITH RECURSIVE pairs(priority, job_id) AS (
    (SELECT priority, job_id FROM items
     WHERE guid = %(guid)s AND status = 'pending' AND NOT held
       AND NOT EXISTS (SELECT 1 FROM guid_states h WHERE h.guid = %(guid)s AND h.state <> 'online')
     ORDER BY guid, priority, job_id LIMIT 1)
    UNION ALL
    SELECT n.priority, n.job_id
    FROM pairs p
    CROSS JOIN LATERAL (
        SELECT priority, job_id FROM items
        WHERE guid = %(guid)s AND status = 'pending' AND NOT held AND (priority, job_id) > (p.priority, p.job_id)
        ORDER BY guid, priority, job_id LIMIT 1
    ) n
), due AS (
    SELECT extract(epoch FROM min(d.ready_at) - now())::float8 AS due_in_s
    FROM pairs p
    CROSS JOIN LATERAL (
        SELECT COALESCE(not_before, created_at) AS ready_at FROM items
        WHERE guid = %(guid)s AND status = 'pending' AND NOT held AND priority = p.priority
          AND job_id = p.job_id AND COALESCE(not_before, created_at) > now()
        ORDER BY guid, priority, job_id, COALESCE(not_before, created_at) LIMIT 1
    ) d
), ready AS (
    SELECT i.*, (i.k - 1) / w.weight AS vstart
    FROM pairs p
    CROSS JOIN LATERAL (
        SELECT greatest(COALESCE((l.limits ->> 'weight')::float8, 1.0), 0.001) AS weight
        FROM (SELECT 1) one LEFT JOIN guid_limits l ON l.guid = 'job:' || p.job_id::text
    ) w
    CROSS JOIN LATERAL (
        SELECT item_id, job_id, shard_id, guid, to_id, content, idem_key, priority, kind, expire_at,
               not_before, created_at, traceparent, COALESCE(not_before, created_at) AS ready_at,
               row_number() OVER (ORDER BY COALESCE(not_before, created_at), item_id) AS k
        FROM items
        WHERE guid = %(guid)s AND status = 'pending' AND NOT held AND priority = p.priority
          AND job_id = p.job_id AND COALESCE(not_before, created_at) <= now()
          AND item_id::text <> ALL(%(exclude)b::text[])
        ORDER BY guid, priority, job_id, COALESCE(not_before, created_at), item_id
        LIMIT %(limit)s
    ) i
)
SELECT r.item_id::text, r.job_id::text, r.shard_id, r.guid, r.to_id,
       -- NULL on the item: its job's common content (a primary-key probe, as for the tenant)
       COALESCE(r.content, (SELECT j.item_content FROM jobs j WHERE j.job_id = r.job_id)) AS content,
       r.idem_key, r.priority, r.kind, r.expire_at, r.not_before, r.created_at, r.traceparent, r.ready_at,
       d.due_in_s, (SELECT j.tenant FROM jobs j WHERE j.job_id = r.job_id) AS tenant
FROM due d
LEFT JOIN LATERAL (
    SELECT * FROM ready ORDER BY priority, vstart, ready_at, item_id LIMIT %(limit)s
) r ON true
ORDER BY r.priority, r.vstart, r.ready_at, r.item_id
