-- One keyset page of a job's items, by item id, within the job's range of ids (``first`` and
-- ``last``: item_span.sql), so that a page reads its own job's rows and stops, not the ids of
-- the jobs created before and after it. Planned for each page's values (never a generic plan:
-- which index serves depends on the job's share of the range and on the filter). The page is
-- cut first, then joined: the holds are looked up for its rows only, not for every item that
-- matches the filter. ``waiting``: why an open item is not moving
-- (a hold on its job, shard or guid; a retry not yet due; its media not ready yet; a
-- verification), NULL otherwise.
-- A completed job is no hold: a compensation in it reopens the job.
SELECT i.item_id::text AS item_id, i.shard_id, i.guid, i.to_id, i.status::text AS status, i.attempts, i.priority,
       i.held, i.compensates::text AS compensates, i.last_error_class, i.last_error, i.next_attempt_at,
       i.expire_at, i.created_at, i.updated_at,
       CASE WHEN i.status IN ('pending', 'waiting_retry') AND pacer_hold_reason(
                 CASE WHEN j.status = 'completed' THEN 'running' ELSE j.status END, j.paused_reason,
                 s.status, s.paused_reason, pacer_guid_hold(g.paused_reason, h.state::text, h.reason)) IS NOT NULL
            THEN 'waiting: ' || pacer_hold_reason(CASE WHEN j.status = 'completed' THEN 'running' ELSE j.status END,
                                                  j.paused_reason, s.status, s.paused_reason,
                                                  pacer_guid_hold(g.paused_reason, h.state::text, h.reason))
            WHEN i.status = 'waiting_retry'  -- in UTC, whatever the session's zone, as the console shows times
            THEN 'waiting: retry due at ' || to_char(i.next_attempt_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')
                 || ' UTC'
            WHEN i.status = 'pending' AND i.last_error_class = 'media_pending' AND i.not_before > now()
            THEN 'waiting: ' || i.last_error
            WHEN i.status = 'recovery_pending' THEN 'waiting: delivery being verified with the gateway'
       END AS waiting
FROM (
    SELECT i.*
    FROM items i
    WHERE i.job_id = %(job)s::uuid
      AND i.item_id BETWEEN %(first)s::uuid AND %(last)s::uuid
      AND (%(statuses)s::item_status[] IS NULL OR i.status = ANY(%(statuses)s::item_status[]))
      AND (%(guid)s::text IS NULL OR i.guid = %(guid)s::text)
      AND (%(error_class)s::text IS NULL OR i.last_error_class = %(error_class)s::text)
      AND (NOT %(with_error)s OR i.last_error_class IS NOT NULL)
      AND (%(after)s::uuid IS NULL OR i.item_id > %(after)s::uuid)
    ORDER BY i.item_id
    LIMIT %(limit)s
) i
JOIN jobs j ON j.job_id = i.job_id
JOIN shards s ON s.shard_id = i.shard_id
LEFT JOIN guid_leases g ON g.guid = i.guid
LEFT JOIN guid_states h ON h.guid = i.guid
ORDER BY i.item_id  -- the uuid column, as in the WHERE (not the text alias)
