-- This sender's own pacing defaults, read by the stall count and the Control API for the
-- guids it holds (migration 0039); written at start and again every few minutes.
INSERT INTO sender_limits (owner, limits, seen_at)
VALUES (%(owner)s, %(limits)s, now())
ON CONFLICT (owner) DO UPDATE SET limits = EXCLUDED.limits, seen_at = now()
