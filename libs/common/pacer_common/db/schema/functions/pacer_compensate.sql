-- One manual retry's decision and its compensation item (a new pending item with the same
-- idempotency key, ``compensates`` = the original) for a terminal item that was not
-- delivered, with its event and its shard's projected pending count; the shard's and job's
-- rows are pacer_retry_items' to update, after every item's. Answers:
--   not_found, conflict (the item is executing, or a retry of it is already open, or it is
--   unverified: recorded in operator_conflicts), already_queued, already_delivered;
--   refused: the item's job is cancelled or terminated (its items are never claimed again),
--            or the item is a ticket notification superseded by a newer status version of the
--            same business id (sending the old status would be wrong);
--   created, with "waiting: …" in the message when the job, shard or guid is on hold: the
--            compensation stays pending, held, and runs once the hold is lifted; with "in doubt:
--            …" when the database was restored from a backup after the item last changed
--            (pacer_restored_after): a retry of it may have been delivered between the backup
--            and the restore, so the compensation starts in doubt, as `pacer after-restore`
--            leaves what it cannot vouch for (recovery_pending, 'ItemInDoubt' with restored:
--            true, its key reserved), and the verifier asks the gateway before anything sends
--            it: found → confirmed, never sent; not found → pending, sent as usual. That
--            ItemInDoubt carries error_class in_doubt and the error, as the item's row does,
--            and source compensated: no answer of the gateway, so the reconciler's circuit
--            breakers count it neither as a failure nor as a success of its job and guid.
-- An unverified item is not retried: it may have been delivered, so its idempotency key stays
-- reserved in send_ledger and a compensation (same key) could only be abandoned as a
-- duplicate. It is resolved instead (pacer_resolve_unverified; not delivered: it is sent again
-- under its key).
-- The newer-version check runs under the business id's coalescing lock, taken before the
-- item's row as pacer_coalesce takes them (the lock, then the items): a retry racing the
-- planning of a newer version either sees it, or is seen by its pacer_coalesce, which then
-- supersedes the compensation.
CREATE OR REPLACE FUNCTION pacer_compensate(p_item uuid, p_actor text, p_priority smallint DEFAULT NULL)
RETURNS TABLE (outcome text, new_item uuid, message text)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
#variable_conflict use_column
DECLARE
    o items%ROWTYPE;
    j jobs%ROWTYPE;
    newer integer;
    open_id uuid;
    c uuid;
    hold text;
    doubt boolean;
    why constant text := 'a retry of an item from before a restore from a backup: a retry of it may have been '
                         'delivered after the backup, so it is verified before it is sent';
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('pacer.coalesce:' || k.tenant || ':' || k.coalesce_key))
    FROM items i JOIN jobs k ON k.job_id = i.job_id
    WHERE i.item_id = p_item AND k.coalesce_key IS NOT NULL;
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
    IF o.status = 'unverified' THEN
        INSERT INTO operator_conflicts (item_id, actor, reason) VALUES (p_item, p_actor, 'unverified');
        RETURN QUERY SELECT 'conflict'::text, NULL::uuid,
            format('this item is unverified: it may have been delivered, and its idempotency key stays reserved, '
                   'so a retry could never be sent; it is resolved instead, once it is known whether it was '
                   'delivered, by a tech_admin or admin token not scoped to tenants (the console''s In doubt page, '
                   'or POST /api/v1/items/%s/resolve): resolved as not delivered, it goes back to pending under '
                   'its own key, no retry needed', p_item);
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
        WHERE n.coalesce_key = j.coalesce_key AND n.tenant = j.tenant AND n.coalesce_version > j.coalesce_version;
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

    doubt := pacer_restored_after(p_item);
    c := pacer_item_id((SELECT j.created_at FROM jobs j WHERE j.job_id = o.job_id));  -- in its job's partition
    INSERT INTO items (item_id, job_id, shard_id, guid, to_id, content, idem_key, priority, kind,
                       status, version, expire_at, compensates)
    VALUES (c, o.job_id, o.shard_id, o.guid, o.to_id, o.content, o.idem_key,
            COALESCE(p_priority, o.priority), o.kind, 'pending', 0,
            CASE WHEN o.expire_at > now() THEN o.expire_at END, p_item);
    INSERT INTO item_events (item_id, job_id, shard_id, guid, version, type, from_status, to_status, payload)
    VALUES (c, o.job_id, o.shard_id, o.guid, 0, 'ItemCompensationCreated', 'pending', 'pending',
            jsonb_build_object('compensates', p_item, 'actor', p_actor,
                               'priority', COALESCE(p_priority, o.priority)));
    IF doubt THEN
        -- Moved as any item is (the reconciler's counts take it from pending to
        -- recovery_pending), its key reserved (pacer_reserve_key: no lock per key, which a bulk
        -- retry would hold for every item to its commit). Not reserved when another item holds
        -- the key: found not delivered, the compensation is then abandoned as a duplicate when
        -- it is begun.
        PERFORM pacer_transition(ARRAY[c], '{pending}', 'recovery_pending', 'ItemInDoubt',
            jsonb_build_object('restored', true, 'actor', p_actor, 'compensates', p_item,
                               'source', 'compensated', 'error_class', 'in_doubt', 'error', why),
            p_clear_lease => true, p_error_class => 'in_doubt', p_error => why);
        PERFORM pacer_reserve_key(c);
    END IF;
    INSERT INTO shard_status_counts AS s (shard_id, status, n) VALUES (o.shard_id, 'pending', 1)
    ON CONFLICT (shard_id, status) DO UPDATE SET n = s.n + 1;
    -- a completed job or shard runs again with the compensation (pacer_retry_items)
    SELECT pacer_hold_reason(CASE WHEN j.status = 'completed' THEN 'running' ELSE j.status END, j.paused_reason,
                             CASE WHEN s.status = 'completed' THEN 'running' ELSE s.status END, s.paused_reason,
                             pacer_guid_hold(g.paused_reason, h.state::text, h.reason))
    INTO hold
    FROM shards s LEFT JOIN guid_leases g ON g.guid = o.guid LEFT JOIN guid_states h ON h.guid = o.guid
    WHERE s.shard_id = o.shard_id;
    RETURN QUERY SELECT 'created'::text, c,
        format('compensation %s queued for item %s', c, p_item)
        || CASE WHEN doubt THEN format('; in doubt: the database was restored from a backup after this item last '
                                       'changed, and a retry of it may have been delivered since; the reconciler asks '
                                       'the gateway whether key %s was delivered before anything sends it (found: '
                                       'confirmed, not sent; not found: sent)', o.idem_key)
                ELSE '' END
        || COALESCE('; waiting: ' || hold, '');
END
$fn$;
