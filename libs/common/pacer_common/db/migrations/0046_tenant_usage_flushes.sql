-- The last flush of sends applied to tenant_usage per sender process, so that a flush is added
-- once: a sender numbers its flushes (seq), resends one whose answer it lost verbatim, and
-- tenant_usage.sql adds a flush only if its seq is past this row's, in the same statement that
-- moves the row on. `sender` is the sender's owner (`<name>:<12 hex>`, new at each start).
-- `at` is when the row last moved: the reconciler deletes the rows of senders gone for longer
-- than PACER_RECONCILER_RETAIN_USAGE_DAYS (prune_usage.sql). One row per sender process.
CREATE TABLE IF NOT EXISTS tenant_usage_flushes (
    sender text        PRIMARY KEY,
    seq    bigint      NOT NULL,
    at     timestamptz NOT NULL DEFAULT now()
);
