-- Pacer schema, version 1: jobs → shards → items, the event log, the send ledger.

CREATE TYPE item_status AS ENUM (
    'pending', 'claimed', 'submitted', 'confirmed', 'failed', 'waiting_retry',
    'abandoned', 'expired', 'recovery_pending', 'unverified'
);

CREATE TABLE jobs (
    job_id          uuid PRIMARY KEY,
    request_id      text NOT NULL UNIQUE,
    kind            text NOT NULL,
    priority        smallint NOT NULL,
    created_by      text NOT NULL,
    message         jsonb NOT NULL,
    content_version integer NOT NULL,
    target_mode     text NOT NULL,
    total           integer NOT NULL,
    status          text NOT NULL DEFAULT 'running'
                    CHECK (status IN ('running', 'paused', 'completed', 'cancelled')),
    expire_at       timestamptz,
    not_before      timestamptz,
    budget_max_sends integer,
    request         jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    dispatched_at   timestamptz,
    started_at      timestamptz,
    finished_at     timestamptz
);

CREATE TABLE shards (
    shard_id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id          uuid NOT NULL REFERENCES jobs (job_id),
    guid            text NOT NULL,
    sub             integer NOT NULL DEFAULT 0,
    total           integer NOT NULL,
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'running', 'paused', 'completed', 'failed')),
    last_progress_at timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (job_id, guid, sub)
);

-- Projection maintained by the reconciler from the event log: items per status per shard.
CREATE TABLE shard_status_counts (
    shard_id        bigint NOT NULL REFERENCES shards (shard_id),
    status          item_status NOT NULL,
    n               bigint NOT NULL,
    PRIMARY KEY (shard_id, status)
);

CREATE TABLE items (
    item_id         uuid PRIMARY KEY,
    job_id          uuid NOT NULL,
    shard_id        bigint NOT NULL,
    guid            text NOT NULL,
    to_id           text NOT NULL,
    content         text NOT NULL,
    idem_key        text NOT NULL,
    priority        smallint NOT NULL,
    kind            text NOT NULL,
    status          item_status NOT NULL DEFAULT 'pending',
    version         integer NOT NULL DEFAULT 0,
    attempts        integer NOT NULL DEFAULT 0,
    lease_owner     text,
    lease_epoch     bigint NOT NULL DEFAULT 0,
    lease_until     timestamptz,
    expire_at       timestamptz,
    not_before      timestamptz,
    next_attempt_at timestamptz,
    last_error_class text,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX items_job_status ON items (job_id, status);
CREATE INDEX items_lease ON items (lease_until) WHERE status IN ('claimed', 'submitted');
CREATE INDEX items_retry_due ON items (next_attempt_at) WHERE status = 'waiting_retry';
CREATE INDEX items_recovery ON items (updated_at) WHERE status = 'recovery_pending';

-- The event log. ``xid`` lets a reader take only events of finished transactions, so it
-- never skips an event whose transaction commits after a later-numbered one.
CREATE TABLE item_events (
    seq             bigint GENERATED ALWAYS AS IDENTITY,
    xid             xid8 NOT NULL DEFAULT pg_current_xact_id(),
    item_id         uuid NOT NULL,
    job_id          uuid NOT NULL,
    shard_id        bigint NOT NULL,
    guid            text NOT NULL,
    version         integer NOT NULL,
    type            text NOT NULL,
    from_status     item_status NOT NULL,
    to_status       item_status NOT NULL,
    payload         jsonb NOT NULL DEFAULT '{}',
    occurred_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (item_id, version)
);
CREATE INDEX item_events_position ON item_events (xid, seq);

-- Business idempotency ledger: at most one successful send per key, checked before sending.
CREATE TABLE send_ledger (
    idem_key        text PRIMARY KEY,
    item_id         uuid NOT NULL,
    guid            text NOT NULL,
    to_id           text NOT NULL,
    state           text NOT NULL CHECK (state IN ('reserved', 'sent')),
    receipt         jsonb,
    reserved_at     timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz
);

-- Positions of log tailers (the reconciler), advanced in the same transaction as effects.
CREATE TABLE log_cursors (
    name            text PRIMARY KEY,
    last_xid        xid8 NOT NULL DEFAULT '0',
    last_seq        bigint NOT NULL DEFAULT 0,
    updated_at      timestamptz NOT NULL DEFAULT now()
);
