-- Operator actions at item level: manual retry (a compensation item) and cancel, plus the
-- cheap records the lock view counts. Neither action ever calls the gateway.

-- A compensation item points at the item it retries. No foreign key: items will be
-- partitioned for retention, and an original may be pruned before its compensation.
ALTER TABLE items ADD COLUMN compensates uuid;
CREATE INDEX items_compensates ON items (compensates) WHERE compensates IS NOT NULL;

-- Every refused manual retry (the item is executing, or a retry of it is already open).
CREATE TABLE operator_conflicts (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    item_id uuid NOT NULL,
    actor   text NOT NULL,
    at      timestamptz NOT NULL DEFAULT now(),
    reason  text NOT NULL
);
CREATE INDEX operator_conflicts_item ON operator_conflicts (item_id, at);

-- The lock view counts duplicate intercepts; without this it would scan the whole event log.
CREATE INDEX item_events_duplicates ON item_events (occurred_at) WHERE type = 'ItemDuplicateIntercepted';

-- Manual retry: never a gateway call, always a new item (a compensation) that goes through
-- the same claim, lease and idempotency-ledger path as any other. Decided under a row lock
-- on the original, so concurrent retries of one item create at most one compensation:
--   claimed / submitted / recovery_pending   → conflict (recorded): the item is executing;
--   pending / waiting_retry                  → already_queued;
--   confirmed                                → already_delivered;
--   failed / expired / abandoned / unverified → conflict (recorded) while a compensation of
--       it is still open, else created: same job, shard, guid, target, content, key and
--       kind; priority p_priority or the original's; the original's expire_at only while it
--       is still ahead (a passed deadline is what the operator chose to override).
-- The compensation's birth is event version 0, pending → pending, which makes the reconciler
-- publish its item command. Its projection delta is zero, so the shard's pending count and
-- the job and shard totals are bumped here, as the planner does at creation.
--
-- Ledger consequence, deliberate: an 'unverified' original still holds its idempotency key
-- as 'reserved', so its compensation is abandoned as ItemDuplicateIntercepted unless the key
-- is released first. A send that may have been delivered is never repeated blindly.
CREATE FUNCTION pacer_retry_item(p_item uuid, p_actor text, p_priority smallint DEFAULT NULL)
RETURNS TABLE (outcome text, new_item uuid, message text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    o items%ROWTYPE;
    open_id uuid;
    c uuid;
BEGIN
    SELECT * INTO o FROM items WHERE item_id = p_item FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, NULL::uuid, format('no item %s', p_item);
        RETURN;
    END IF;
    IF o.status IN ('claimed', 'submitted', 'recovery_pending') THEN
        INSERT INTO operator_conflicts (item_id, actor, reason) VALUES (p_item, p_actor, 'executing');
        RETURN QUERY SELECT 'conflict'::text, NULL::uuid, 'this item is executing, check back later'::text;
        RETURN;
    END IF;
    IF o.status IN ('pending', 'waiting_retry') THEN
        RETURN QUERY SELECT 'already_queued'::text, NULL::uuid,
            format('this item is already queued (%s)', o.status);
        RETURN;
    END IF;
    IF o.status = 'confirmed' THEN
        RETURN QUERY SELECT 'already_delivered'::text, NULL::uuid,
            'this item was delivered; a retry would send it twice'::text;
        RETURN;
    END IF;
    -- Open = the status still has somewhere to go in the transition table.
    SELECT i.item_id INTO open_id FROM items i
    WHERE i.compensates = p_item
      AND EXISTS (SELECT 1 FROM item_transitions t WHERE t.from_status = i.status)
    LIMIT 1;
    IF FOUND THEN
        INSERT INTO operator_conflicts (item_id, actor, reason) VALUES (p_item, p_actor, 'retry_in_progress');
        RETURN QUERY SELECT 'conflict'::text, open_id, 'a retry of this item is already in progress'::text;
        RETURN;
    END IF;

    c := gen_random_uuid();
    INSERT INTO items (item_id, job_id, shard_id, guid, to_id, content, idem_key, priority, kind,
                       status, version, expire_at, compensates)
    VALUES (c, o.job_id, o.shard_id, o.guid, o.to_id, o.content, o.idem_key,
            COALESCE(p_priority, o.priority), o.kind, 'pending', 0,
            CASE WHEN o.expire_at > now() THEN o.expire_at END, p_item);
    INSERT INTO item_events (item_id, job_id, shard_id, guid, version, type, from_status, to_status, payload)
    VALUES (c, o.job_id, o.shard_id, o.guid, 0, 'ItemCompensationCreated', 'pending', 'pending',
            jsonb_build_object('compensates', p_item, 'actor', p_actor,
                               'priority', COALESCE(p_priority, o.priority)));
    INSERT INTO shard_status_counts AS s (shard_id, status, n) VALUES (o.shard_id, 'pending', 1)
    ON CONFLICT (shard_id, status) DO UPDATE SET n = s.n + 1;
    UPDATE shards SET total = total + 1 WHERE shard_id = o.shard_id;
    UPDATE jobs SET total = total + 1 WHERE job_id = o.job_id;
    RETURN QUERY SELECT 'created'::text, c, format('compensation %s queued for item %s', c, p_item);
END
$fn$;

-- Cancel one item: only from pending / waiting_retry, through pacer_transition, so a cancel
-- racing a claim has exactly one winner. Cancel takes effect at item boundaries: an item in
-- flight finishes. If the item slipped back to a cancellable status between the guarded
-- write and the look at it (a lease expiry), the write is tried again.
CREATE FUNCTION pacer_cancel_item(p_item uuid, p_actor text)
RETURNS TABLE (outcome text, message text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    s item_status;
BEGIN
    FOR attempt IN 1..3 LOOP
        PERFORM pacer_transition(ARRAY[p_item], '{pending,waiting_retry}', 'abandoned', 'ItemCancelled',
            jsonb_build_object('actor', p_actor, 'error_class', 'cancelled'), p_clear_lease => true,
            p_error_class => 'cancelled', p_error => format('cancelled by %s', p_actor));
        IF FOUND THEN
            RETURN QUERY SELECT 'cancelled'::text, format('item %s cancelled by %s', p_item, p_actor);
            RETURN;
        END IF;
        SELECT i.status INTO s FROM items i WHERE i.item_id = p_item;
        IF NOT FOUND THEN
            RETURN QUERY SELECT 'not_found'::text, format('no item %s', p_item);
            RETURN;
        END IF;
        IF s IN ('claimed', 'submitted', 'recovery_pending') THEN
            RETURN QUERY SELECT 'too_late'::text,
                'cancel takes effect at item boundaries; this item is in flight'::text;
            RETURN;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM item_transitions t WHERE t.from_status = s) THEN
            RETURN QUERY SELECT 'already_final'::text, format('this item is already %s', s);
            RETURN;
        END IF;
    END LOOP;
    RETURN QUERY SELECT 'too_late'::text,
        'cancel takes effect at item boundaries; this item is in flight'::text;
END
$fn$;
