-- The pacing defaults of senders gone for a day (a running sender writes its row every few
-- minutes, migration 0039). One row per sender process, so a plain DELETE.
WITH gone AS (
    DELETE FROM sender_limits WHERE seen_at < now() - interval '1 day' RETURNING 1
)
SELECT count(*) AS pruned FROM gone
