-- Each sender's own pacing defaults (its PACER_SENDER_* limits), the layer under every guid's
-- `*` override. The stall count and the Control API read a guid's limits as the sender
-- holding its lease (guid_leases.owner) applies them: quiet hours or a per-day cap set only
-- in a sender's environment hold its guids there too. A sender writes its row at start and
-- again every few minutes (seen_at); the reconcilers' maintenance deletes rows not seen for a
-- day.
CREATE TABLE sender_limits (
    owner   text PRIMARY KEY,
    limits  jsonb NOT NULL,
    seen_at timestamptz NOT NULL DEFAULT now()
);
