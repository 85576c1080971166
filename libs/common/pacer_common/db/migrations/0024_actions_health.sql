-- guid lifecycle: what the gateway says of each account (seed 004). `online` sends;
-- `offline`, `kicked`, `unauthorized` hold the guid's whole queue (next_ready.sql,
-- waiting_guids.sql and pacer_begin_send claim nothing of it) until it is `online` again.
-- Learned from `device.status` callbacks, from send failures (the gateway codes that mean
-- one of these states) and from operators. An event applies only when it is newer (its
-- `ts`) than the newest one applied: a late or repeated callback never overrides a newer
-- state (pacer_set_guid_state; pacer_common/domain/guid_health.py states the same rule).
-- Pacer never replaces a guid: a held guid waits for its own account to come back.
CREATE TYPE guid_state AS ENUM ('online', 'offline', 'kicked', 'unauthorized');

CREATE TABLE guid_states (
    guid text PRIMARY KEY,
    state guid_state NOT NULL,
    since timestamptz NOT NULL DEFAULT now(),   -- when this state began (the first event that set it)
    source text NOT NULL CHECK (source IN ('callback', 'send_failure', 'operator')),
    reason text,
    event_ts timestamptz NOT NULL,              -- the newest event applied (any state): older ones are ignored
    events bigint NOT NULL DEFAULT 1,           -- events applied (a repeated state only moves event_ts)
    changes bigint NOT NULL DEFAULT 0           -- state changes
);
-- The held guids, for the sweeps and the gauge, without a scan of every guid.
CREATE INDEX guid_states_held ON guid_states (guid) WHERE state <> 'online';

-- Every change of a guid's state, newest last.
CREATE TABLE guid_state_history (
    id bigserial PRIMARY KEY,
    guid text NOT NULL,
    state guid_state NOT NULL,
    previous guid_state,
    at timestamptz NOT NULL DEFAULT now(),
    event_ts timestamptz NOT NULL,
    source text NOT NULL,
    reason text
);
CREATE INDEX guid_state_history_guid ON guid_state_history (guid, id);

-- pacer_set_guid_state: db/schema/functions/pacer_set_guid_state.sql
-- pacer_guid_hold: db/schema/functions/pacer_guid_hold.sql
-- guid_states_online (release request when a guid is back online): db/schema/triggers/

-- Media (image, file, video) a guid has uploaded to the gateway: one row per distinct media
-- (its url) per guid, so a job to many targets uploads once. Items of a media job are sent
-- by `mediaId` only once the row is `ready` (a `media.ready` callback, or the sender's poll
-- of /media/status when no callback came in time); until then they wait, pending, with the
-- reason (`last_error_class = 'media_pending'`); a `failed` upload fails them.
CREATE TABLE media (
    guid text NOT NULL,
    url_hash text NOT NULL,              -- sha256 of the url, hex
    url text NOT NULL,
    kind text NOT NULL CHECK (kind IN ('image', 'file', 'video')),
    file_name text,
    media_id text NOT NULL,
    status text NOT NULL CHECK (status IN ('pending', 'ready', 'failed')),
    reason text,
    uploaded_at timestamptz NOT NULL DEFAULT now(),
    checked_at timestamptz,              -- last /media/status poll
    settled_at timestamptz,              -- when it became ready or failed
    settled_by text CHECK (settled_by IN ('upload', 'callback', 'poll')),
    PRIMARY KEY (guid, url_hash)
);
CREATE UNIQUE INDEX media_by_id ON media (guid, media_id);

-- Pacer's copy of customers, written by customer.sync items (seed 000 §12): under a version
-- check, so of concurrent syncs of one customer (real time, manual, full reconciliation)
-- each version takes effect once and the newest wins; an older or equal one changes nothing.
CREATE TABLE customers (
    customer_id text PRIMARY KEY,
    name text NOT NULL DEFAULT '',
    remark text NOT NULL DEFAULT '',
    tags jsonb NOT NULL DEFAULT '[]',
    version bigint NOT NULL,
    synced_at timestamptz NOT NULL DEFAULT now(),
    synced_by uuid,                      -- the item whose sync wrote this version
    writes bigint NOT NULL DEFAULT 1     -- versions applied
);
