-- Held items whose job, shard and guid are no longer on hold go pending → pending
-- (ItemReleased); the event makes this reconciler publish their commands again.
SELECT pacer_release_held(%(limit)s) AS n
