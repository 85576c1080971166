-- Control that cannot be undone, skipped or deadlocked:
--   * a forced release of a guid lease evicts its holder (fenced: a new epoch; the holder's
--     renewal, which needs owner AND epoch, fails; it may not take the guid back before its
--     released lease would have run out; nobody else takes it while the holder's sends are
--     still in flight);
--   * item leases can be force-released too (claimed → pending, submitted → recovery_pending);
--   * a manual retry that could never be sent is refused with the reason;
--   * hot limit changes carry their transaction id, so senders read them in commit order;
--   * a batch of begins locks its budgeted jobs in one order, so two senders cannot deadlock.

-- -- guid leases: eviction --------------------------------------------------------------------
ALTER TABLE guid_leases
    ADD COLUMN forced_releases bigint NOT NULL DEFAULT 0,
    ADD COLUMN released_by     text,
    ADD COLUMN released_at     timestamptz,
    ADD COLUMN evicted_owner   text,
    ADD COLUMN evicted_until   timestamptz;

-- The acquire rule's look at an evicted holder's sends still in flight on the guid.
CREATE INDEX items_guid_in_flight ON items (guid) WHERE status IN ('claimed', 'submitted');

-- Take or keep the leases of these guids: free ones, expired ones and our own — except
--   * a guid whose lease was force-released from us, until our released lease would have run
--     out (evicted_until): the release must not be taken back by the holder's next look;
--   * a force-released guid whose evicted holder still has a send in flight on it (an item
--     claimed or submitted under a live item lease): its request may still be on the wire,
--     so a successor waits for it to settle (or for its item lease to run out).
-- Any owner that takes the guid clears the eviction.
CREATE OR REPLACE FUNCTION pacer_acquire_guids(p_guids text[], p_owner text, p_ttl interval)
RETURNS TABLE (guid text, epoch bigint, last_send_at timestamptz, took_over boolean, db_now timestamptz)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
BEGIN
    INSERT INTO guid_leases (guid) SELECT DISTINCT unnest(p_guids) ON CONFLICT DO NOTHING;
    RETURN QUERY
    WITH free AS (
        SELECT l.guid, l.owner AS prev_owner
        FROM guid_leases l
        WHERE l.guid = ANY(p_guids)
          AND (l.owner IS NULL OR l.owner = p_owner OR l.lease_until < now())
          AND (l.evicted_owner IS NULL
               OR (l.evicted_owner = p_owner AND l.evicted_until <= now())
               OR (l.evicted_owner <> p_owner AND NOT EXISTS (
                     SELECT 1 FROM items i
                     WHERE i.guid = l.guid AND i.status IN ('claimed', 'submitted')
                       AND i.lease_owner = l.evicted_owner AND i.lease_until > now())))
        ORDER BY l.guid
        FOR UPDATE
    )
    UPDATE guid_leases g SET
        epoch         = CASE WHEN free.prev_owner IS DISTINCT FROM p_owner THEN g.epoch + 1 ELSE g.epoch END,
        since         = CASE WHEN free.prev_owner IS DISTINCT FROM p_owner THEN now() ELSE g.since END,
        renew_count   = CASE WHEN free.prev_owner = p_owner THEN g.renew_count + 1 ELSE 0 END,
        takeovers     = g.takeovers + CASE WHEN free.prev_owner IS NOT NULL AND free.prev_owner <> p_owner
                                           THEN 1 ELSE 0 END,
        owner         = p_owner,
        lease_until   = now() + p_ttl,
        evicted_owner = NULL,
        evicted_until = NULL
    FROM free
    WHERE g.guid = free.guid
    RETURNING g.guid, g.epoch, g.last_send_at,
              (free.prev_owner IS NOT NULL AND free.prev_owner <> p_owner), now();
END
$fn$;

-- An admin's forced release of a guid's lease, audited. The epoch moves on at once, so the
-- holder's renewal (owner and epoch) fails, and pacer_begin_send refuses it (no longer the
-- owner). Outcomes: done, noop (no holder), not_found.
CREATE FUNCTION pacer_force_release_guid(p_guid text, p_actor text, p_reason text DEFAULT NULL)
RETURNS TABLE (outcome text, message text, previous_owner text, epoch bigint, evicted_until timestamptz,
               in_flight integer)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    l guid_leases%ROWTYPE;
    busy integer;
    until timestamptz;
BEGIN
    SELECT * INTO l FROM guid_leases WHERE guid = p_guid FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, format('no guid %s', p_guid), NULL::text, NULL::bigint,
                            NULL::timestamptz, 0;
        RETURN;
    END IF;
    IF l.owner IS NULL THEN
        RETURN QUERY SELECT 'noop'::text, format('guid %s has no lease holder; nothing to release', p_guid),
                            NULL::text, l.epoch, l.evicted_until, 0;
        RETURN;
    END IF;
    SELECT count(*) INTO busy FROM items i
    WHERE i.guid = p_guid AND i.status IN ('claimed', 'submitted') AND i.lease_owner = l.owner
      AND i.lease_until > now();
    until := GREATEST(l.lease_until, now());
    UPDATE guid_leases SET owner = NULL, lease_until = NULL, epoch = l.epoch + 1,
                           forced_releases = l.forced_releases + 1, released_by = p_actor, released_at = now(),
                           evicted_owner = l.owner, evicted_until = until
    WHERE guid = p_guid;
    PERFORM pacer_audit(p_actor, 'release_lock', 'guid', p_guid, p_reason,
        jsonb_build_object('owner', l.owner, 'epoch', l.epoch, 'lease_until', l.lease_until,
                           'expired', l.lease_until < now()),
        jsonb_build_object('owner', NULL, 'epoch', l.epoch + 1, 'lease_until', NULL,
                           'evicted_owner', l.owner, 'evicted_until', until, 'sends_in_flight', busy));
    RETURN QUERY SELECT 'done'::text,
        format('lease of guid %s released (was held by %s, epoch %s; now epoch %s). The holder is fenced: '
               'its renewal and its next send are refused, and it may not take the guid back before %s. '
               'Another sender may take it %s.',
               p_guid, l.owner, l.epoch, l.epoch + 1, until,
               CASE WHEN busy > 0 THEN format('once the %s send(s) it has in flight settle', busy) ELSE 'now' END),
        l.owner, l.epoch + 1, until, busy;
END
$fn$;

-- -- item leases: forced release --------------------------------------------------------------
-- claimed → pending (nothing was sent), submitted → recovery_pending (it may have been sent:
-- verified, never resent blindly); either way with a new fencing epoch, so the holder's
-- confirm or settle is refused. Audited. Outcomes: done, conflict (holds no lease), not_found.
CREATE FUNCTION pacer_force_release_item(p_item uuid, p_actor text, p_reason text DEFAULT NULL)
RETURNS TABLE (outcome text, message text, from_status text, to_status text, epoch bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    o items%ROWTYPE;
    why text := format('lease force-released by %s%s', p_actor, COALESCE(': ' || p_reason, ''));
BEGIN
    SELECT * INTO o FROM items WHERE item_id = p_item FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, format('no item %s', p_item), NULL::text, NULL::text, NULL::bigint;
        RETURN;
    END IF;
    IF o.status = 'claimed' THEN
        PERFORM pacer_transition(ARRAY[p_item], '{claimed}', 'pending', 'ItemLeaseExpired',
            jsonb_build_object('reason', why, 'forced', true, 'actor', p_actor), p_clear_lease => true);
    ELSIF o.status = 'submitted' THEN
        PERFORM pacer_transition(ARRAY[p_item], '{submitted}', 'recovery_pending', 'ItemInDoubt',
            jsonb_build_object('reason', why, 'forced', true, 'actor', p_actor), p_clear_lease => true,
            p_error_class => 'in_doubt', p_error => why);
    ELSE
        RETURN QUERY SELECT 'conflict'::text,
            format('item %s is %s and holds no lease (only claimed or submitted items do)', p_item, o.status),
            o.status::text, o.status::text, o.lease_epoch;
        RETURN;
    END IF;
    UPDATE items SET lease_epoch = lease_epoch + 1 WHERE item_id = p_item;
    PERFORM pacer_audit(p_actor, 'release_lock', 'item', p_item::text, p_reason,
        jsonb_build_object('status', o.status, 'lease_owner', o.lease_owner, 'lease_epoch', o.lease_epoch,
                           'lease_until', o.lease_until),
        jsonb_build_object('status', CASE WHEN o.status = 'claimed' THEN 'pending' ELSE 'recovery_pending' END,
                           'lease_owner', NULL, 'lease_epoch', o.lease_epoch + 1, 'lease_until', NULL));
    RETURN QUERY SELECT 'done'::text,
        CASE WHEN o.status = 'claimed'
             THEN format('item %s released: claimed by %s, nothing was sent; it is pending again (epoch %s)',
                         p_item, o.lease_owner, o.lease_epoch + 1)
             ELSE format('item %s released: it was submitted by %s and may have been sent, so it is '
                         'recovery_pending and will be verified with the gateway, never resent blindly (epoch %s)',
                         p_item, o.lease_owner, o.lease_epoch + 1) END,
        o.status::text, CASE WHEN o.status = 'claimed' THEN 'pending' ELSE 'recovery_pending' END,
        o.lease_epoch + 1;
END
$fn$;

-- -- manual retry: never into a dead end -------------------------------------------------------
-- pacer_retry_item (0004) with three more answers:
--   refused: the item's job is cancelled or terminated (its items are never claimed again),
--            or the item is a ticket notification superseded by a newer status version of the
--            same business id (sending the old status would be wrong);
--   created, with "waiting: …" in the message when the job, shard or guid is on hold: the
--            compensation stays pending, held, and runs once the hold is lifted.
CREATE OR REPLACE FUNCTION pacer_retry_item(p_item uuid, p_actor text, p_priority smallint DEFAULT NULL)
RETURNS TABLE (outcome text, new_item uuid, message text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    o items%ROWTYPE;
    j jobs%ROWTYPE;
    newer integer;
    open_id uuid;
    c uuid;
    hold text;
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
    SELECT * INTO j FROM jobs WHERE job_id = o.job_id;
    IF j.status IN ('cancelled', 'terminated') THEN
        RETURN QUERY SELECT 'refused'::text, NULL::uuid,
            CASE WHEN j.status = 'cancelled'
                 THEN format('job %s is cancelled: its items are never sent again, so a retry would wait for '
                             'ever; publish a new job request instead', o.job_id)
                 ELSE format('job %s is terminated: resume the job first (once its in-flight items are '
                             'settled), then retry', o.job_id) END;
        RETURN;
    END IF;
    IF j.coalesce_key IS NOT NULL THEN
        SELECT max(n.coalesce_version) INTO newer FROM jobs n
        WHERE n.coalesce_key = j.coalesce_key AND n.coalesce_version > j.coalesce_version;
        IF newer IS NOT NULL THEN
            RETURN QUERY SELECT 'refused'::text, NULL::uuid,
                format('superseded: business id %s has a newer status version (%s > %s); '
                       'retrying would send an outdated status', j.coalesce_key, newer, j.coalesce_version);
            RETURN;
        END IF;
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
    SELECT pacer_hold_reason(CASE WHEN j.status = 'completed' THEN 'running' ELSE j.status END, j.paused_reason,
                             s.status, s.paused_reason, g.paused_reason)
    INTO hold
    FROM shards s LEFT JOIN guid_leases g ON g.guid = o.guid
    WHERE s.shard_id = o.shard_id;
    RETURN QUERY SELECT 'created'::text, c,
        format('compensation %s queued for item %s', c, p_item) || COALESCE('; waiting: ' || hold, '');
END
$fn$;

-- -- hot limits: commit order ------------------------------------------------------------------
-- Each change carries the id of the transaction that made it. A sender reads the changes of
-- transactions older than the oldest one still running (as the reconciler reads the event
-- log), past the last id it has seen: a change that commits after a later-stamped one is
-- still read, because its transaction id was below the horizon only once it had finished.
ALTER TABLE guid_limits ADD COLUMN change_xid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX guid_limits_change ON guid_limits (change_xid);

CREATE FUNCTION pacer_stamp_limits_change() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    NEW.change_xid := pg_current_xact_id();
    RETURN NEW;
END
$fn$;
CREATE TRIGGER guid_limits_change BEFORE INSERT OR UPDATE ON guid_limits
FOR EACH ROW EXECUTE FUNCTION pacer_stamp_limits_change();

-- -- budgets: one lock order -------------------------------------------------------------------
-- A budgeted send counts on its job's row, which stays locked until the batch commits. Items
-- are begun in guid order, so two senders' batches with interleaved guids of two budgeted
-- jobs would take the two job rows in opposite orders and deadlock. The batch therefore
-- locks its budgeted jobs first, in job id order, before any guid lease or item.
CREATE OR REPLACE FUNCTION pacer_begin_send_many(p_items uuid[], p_owner text, p_ttl interval, p_keys text[],
                                                 p_guids text[], p_to_ids text[])
RETURNS TABLE (ord bigint, outcome text, epoch bigint, attempts integer, holder text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    r record;
BEGIN
    PERFORM 1 FROM jobs j
    WHERE j.job_id IN (SELECT i.job_id FROM items i WHERE i.item_id = ANY(p_items))
      AND j.budget_max_sends IS NOT NULL
    ORDER BY j.job_id
    FOR NO KEY UPDATE;
    FOR r IN
        SELECT t.item, t.key, t.guid, t.to_id, t.ord
        FROM unnest(p_items, p_keys, p_guids, p_to_ids) WITH ORDINALITY AS t(item, key, guid, to_id, ord)
        ORDER BY t.guid, t.item, t.ord
    LOOP
        RETURN QUERY SELECT r.ord, b.outcome, b.epoch, b.attempts, b.holder
                     FROM pacer_begin_send(r.item, p_owner, p_ttl, r.key, r.guid, r.to_id) AS b;
    END LOOP;
END
$fn$;
