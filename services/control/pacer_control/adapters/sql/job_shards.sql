-- A job's shards with their items per status, and what tells a stalled shard from one waiting
-- for its guid (shard_stall_inputs; domain/views.py `stalled`). Which shards, in what order:
--  * by guid (and sub), ``limit`` of them (NULL: all) after shard ``after`` (NULL: from the
--    first); a keyset page read along the (job_id, guid, sub) key;
--  * ``attention``: the ``limit`` an operator looks at first: paused shards; then those not
--    completed whose guid is not held, by how long they have been quiet
--    (shard_stall_inputs.quiet_since), longest first: a stalled shard is among them; then
--    those whose guid is held (paused, or not online: quiet for that reason); then the
--    completed ones by guid. Read from the shards and their guids' holds, not their counts.
-- Planned for its values (prepare=False): a false ``attention`` folds its sort keys away.
WITH page AS (
    SELECT s.shard_id, s.guid, s.sub, s.status, s.paused_reason, s.paused_by, s.total, s.last_progress_at,
           CASE WHEN %(attention)s THEN s.status <> 'paused' END AS k1,
           CASE WHEN %(attention)s THEN
               CASE WHEN s.status = 'completed' THEN 2
                    WHEN EXISTS (SELECT 1 FROM guid_leases g WHERE g.guid = s.guid AND g.paused_reason IS NOT NULL)
                      OR EXISTS (SELECT 1 FROM guid_states h WHERE h.guid = s.guid AND h.state <> 'online') THEN 1
                    ELSE 0 END
           END AS k2,
           CASE WHEN %(attention)s AND s.status <> 'completed'
                THEN greatest(COALESCE(s.last_progress_at, s.created_at), j.not_before) END AS k3
    FROM shards s
    JOIN jobs j ON j.job_id = s.job_id
    WHERE s.job_id = %(job)s::uuid
      AND (%(after)s::bigint IS NULL
           OR (s.guid, s.sub) > (SELECT a.guid, a.sub FROM shards a
                                 WHERE a.shard_id = %(after)s::bigint AND a.job_id = %(job)s::uuid))
    ORDER BY k1, k2, k3, s.guid, s.sub
    LIMIT %(limit)s
), counts AS (
    SELECT sc.shard_id, jsonb_object_agg(sc.status::text, sc.n) AS counts
    FROM page p
    JOIN shard_status_counts sc ON sc.shard_id = p.shard_id AND sc.n <> 0
    GROUP BY sc.shard_id
)
SELECT p.shard_id, p.guid, p.sub, p.status, p.paused_reason, p.paused_by, p.total, p.last_progress_at,
       COALESCE(c.counts, '{}'::jsonb) AS counts,
       v.quiet_since, v.guid_held, v.limits, v.windows, v.sender_limits, v.job_gap, v.penalty,
       -- why its guid holds it, shown (guid_held says whether): out of service, or paused
       (SELECT h.state::text FROM guid_states h WHERE h.guid = p.guid AND h.state <> 'online') AS guid_state,
       (SELECT g.paused_reason FROM guid_leases g WHERE g.guid = p.guid) AS guid_paused_reason
FROM page p
-- by key for each shard of the page, never the view whole (OFFSET 0: not flattened into a join)
CROSS JOIN LATERAL (SELECT * FROM shard_stall_inputs i WHERE i.shard_id = p.shard_id OFFSET 0) v
LEFT JOIN counts c ON c.shard_id = p.shard_id
ORDER BY p.k1, p.k2, p.k3, p.guid, p.sub
