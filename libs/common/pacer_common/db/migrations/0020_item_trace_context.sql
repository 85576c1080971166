-- The W3C trace context (traceparent) of the job request an item belongs to, written by the
-- planner: a sender that reads the item from Postgres (a lost doorbell, a backlog, a retry)
-- continues the same trace, and the reconciler puts it on the item's outcomes. NULL for
-- items stored before this version.
ALTER TABLE items ADD COLUMN traceparent text;
