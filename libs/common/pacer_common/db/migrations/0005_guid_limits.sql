-- Hot-adjustable pacing limits per guid ('*' = every guid without a row of its own).
-- Senders poll for rows changed since their last look and apply them within seconds.
CREATE TABLE guid_limits (
    guid        text PRIMARY KEY,
    limits      jsonb NOT NULL,
    updated_by  text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX guid_limits_updated ON guid_limits (updated_at);
