-- Whether a media item may take a step for its media now (an upload, a status poll, a wait,
-- a failure of its media): asked before the step, since pacer_begin_send, where holds are
-- otherwise enforced, comes only after it. An item of a paused or terminated job, of a job
-- awaiting approval, of a paused shard, or of a guid paused or not online, calls the gateway
-- for nothing (no upload before an approval, no polls on a held account) and keeps the reason
-- it has. What pacer_begin_send would answer then, as it does it:
--
--   'held'         its job, shard or guid holds it (pacer_hold_reason, the reason in
--                  ``holder``): marked held, so the reconciler's release_held sweep publishes
--                  it again once every hold on it is lifted;
--   'not_pending'  no longer pending (taken, finished), or of a cancelled job: abandoned as
--                  the cancel abandons it (pacer_abandon_cancelled; never held, since a
--                  cancelled job never runs again).
--
-- No outcome (NULL): nothing holds it. Primary-key probes of the item, its job and shard,
-- and its guid's lease and state: made only for an item whose media is not ready to send.
WITH x AS (
    SELECT i.item_id, i.status::text AS status, j.status AS job_status,
           pacer_hold_reason(j.status, j.paused_reason, s.status, s.paused_reason,
                             pacer_guid_hold(l.paused_reason, gs.state::text, gs.reason)) AS hold
    FROM items i
    JOIN jobs j ON j.job_id = i.job_id
    JOIN shards s ON s.shard_id = i.shard_id
    LEFT JOIN guid_leases l ON l.guid = i.guid
    LEFT JOIN guid_states gs ON gs.guid = i.guid
    WHERE i.item_id = %(item)s::uuid
), marked AS (
    UPDATE items i SET held = true
    FROM x
    WHERE i.item_id = x.item_id AND i.status = 'pending' AND NOT i.held
      AND x.status = 'pending' AND x.job_status <> 'cancelled' AND x.hold IS NOT NULL
    RETURNING i.item_id
)
SELECT CASE
           WHEN x.status IS DISTINCT FROM 'pending' THEN 'not_pending'
           WHEN x.job_status = 'cancelled' AND pacer_abandon_cancelled(ARRAY[x.item_id]) IS NOT NULL THEN 'not_pending'
           WHEN x.hold IS NOT NULL THEN 'held'
       END AS outcome,
       x.hold AS holder
FROM (SELECT 1) one
LEFT JOIN x ON true
