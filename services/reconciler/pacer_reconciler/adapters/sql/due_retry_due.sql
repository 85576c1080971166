-- Candidates for the 'retry_due' sweep in this replica's segments, oldest first; SKIP LOCKED keeps
-- off rows in use. Those of a cancelled job (sends in flight when it was cancelled, scheduled
-- again since) are abandoned here instead, as the cancel abandons what waits
-- (pacer_abandon_cancelled, in the sweep's transaction), and are not returned: made pending,
-- each would only be held under a job that never runs again. The job of each is one probe
-- by its key; the function is called with the due items of cancelled jobs only.
WITH due AS MATERIALIZED (
    SELECT item_id, job_id, guid, idem_key, updated_at
    FROM items
    WHERE status = 'waiting_retry' AND next_attempt_at <= now()
      AND {guid_segment} = ANY(%(segments)s::int[])
    ORDER BY updated_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), cancelled AS MATERIALIZED (
    SELECT pacer_abandon_cancelled(array_agg(d.item_id)) AS ids
    FROM due d
    WHERE (SELECT j.status FROM jobs j WHERE j.job_id = d.job_id) = 'cancelled'
)
-- The abandoned ids are read (and so the abandonment made) as the first due row is filtered.
SELECT d.item_id::text AS item_id, d.guid, d.idem_key, d.updated_at
FROM due d
WHERE d.item_id <> ALL(COALESCE((SELECT c.ids FROM cancelled c), '{}'))
ORDER BY d.updated_at
