-- Begin one send, before any gateway call, in one transaction: the caller must hold the
-- guid's lease (else 'guid_lost'); an item of a cancelled job is abandoned as the cancel
-- abandons it (pacer_abandon_cancelled: it came back to pending after the cancel, from a send
-- then in flight) and answers 'not_pending', never held: a cancelled job is never resumed, so
-- nothing would release it; an item of a ticket notification whose business id has a newer
-- status version (a newer job of its tenant and coalesce_key) is superseded as pacer_coalesce supersedes
-- it (→ abandoned, ItemSuperseded) and answers 'not_pending': it was in flight when the newer
-- version was stored and came back (a retry, a deferral), and sent now it would arrive after
-- the newer status; an item within a second of its expire_at (the sender's own margin,
-- pacer_sender.core.EXPIRE_MARGIN_S, measured here after the guid's lock was granted) is
-- expired as the sender expires it at dequeue (→ expired, ItemExpired, error class
-- 'expired') and answers 'expired' ('not_pending' if it was no longer pending): claimed, it
-- could be sent after its expire_at. Neither touches the ledger (a queued item holds no key).
-- A hold on the job, shard or guid marks the item held and
-- answers 'held' with the reason in ``holder``; a budgeted job counts the send under its row
-- lock (the send that would pass the budget pauses the job instead). Then pending → claimed
-- (new lease, epoch + 1) → idempotency key reserved → submitted, recording in ItemSubmitted
-- whether the send was counted against the budget. If another item holds the key, this one
-- is abandoned as an intercepted duplicate ('duplicate').
--
-- The claim extends the caller's guid lease to at least the item's own lease (now() +
-- p_ttl): a sender writes its request at the latest a quarter of that TTL after the claim
-- and the gateway timeout fits in another quarter, so the guid cannot pass to another
-- sender while a send made under it may still be on its way.
--
-- A submitted item comes with what is left of a quiet a gateway asked of its guid (quiet_s,
-- seconds, read under the lease's lock; NULL: none, or over): one another caller asked for
-- (a reconciler's lookup answered with Retry-After) reaches the sender at its next claim, not
-- at its next renewal; the sender waits for a quiet that ends soon after the item's turn and
-- gives the turn up to a longer one.
DO $drop$
BEGIN
    -- The result gained quiet_s: an older definition is replaced, not altered.
    IF EXISTS (SELECT 1 FROM pg_proc WHERE oid = to_regprocedure('pacer_begin_send(uuid, text, interval, text, text, text)')
               AND NOT 'quiet_s' = ANY(proargnames)) THEN
        DROP FUNCTION pacer_begin_send(uuid, text, interval, text, text, text);
    END IF;
END
$drop$;
CREATE OR REPLACE FUNCTION pacer_begin_send(p_item uuid, p_owner text, p_ttl interval, p_idem_key text,
                                            p_guid text, p_to_id text)
RETURNS TABLE (outcome text, epoch bigint, attempts integer, holder text, quiet_s float8)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
    c record;
    h record;
    g record;
    x record;
    hold text;
    newer integer;
    why text;
    counted boolean := false;
BEGIN
    SELECT pacer_guid_hold(l.paused_reason, gs.state::text, gs.reason) AS reason,
           CASE WHEN l.gateway_quiet_until > now() THEN extract(epoch FROM l.gateway_quiet_until - now())::float8
           END AS quiet_s
    INTO g
    FROM guid_leases l LEFT JOIN guid_states gs ON gs.guid = l.guid
    WHERE l.guid = p_guid AND l.owner = p_owner AND l.lease_until > now()
    FOR UPDATE OF l;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'guid_lost'::text, NULL::bigint, NULL::integer, NULL::text, NULL::float8;
        RETURN;
    END IF;
    SELECT i.status, i.job_id, i.expire_at, j.status AS job_status, j.paused_reason AS job_reason,
           j.budget_max_sends, j.coalesce_key, j.coalesce_version, j.tenant,
           s.status AS shard_status, s.paused_reason AS shard_reason
    INTO x
    FROM items i JOIN jobs j ON j.job_id = i.job_id JOIN shards s ON s.shard_id = i.shard_id
    WHERE i.item_id = p_item;
    IF NOT FOUND OR x.status <> 'pending' THEN
        RETURN QUERY SELECT 'not_pending'::text, NULL::bigint, NULL::integer, NULL::text, NULL::float8;
        RETURN;
    END IF;
    IF x.job_status = 'cancelled' THEN
        PERFORM pacer_abandon_cancelled(ARRAY[p_item]);
        RETURN QUERY SELECT 'not_pending'::text, NULL::bigint, NULL::integer, NULL::text, NULL::float8;
        RETURN;
    END IF;
    IF x.coalesce_key IS NOT NULL THEN
        SELECT max(n.coalesce_version) INTO newer FROM jobs n
        WHERE n.coalesce_key = x.coalesce_key AND n.tenant = x.tenant AND n.coalesce_version > x.coalesce_version;
        IF newer IS NOT NULL THEN
            PERFORM pacer_transition(ARRAY[p_item], '{pending}', 'abandoned', 'ItemSuperseded',
                jsonb_build_object('business_id', x.coalesce_key, 'by_version', newer, 'error_class', 'superseded'),
                p_clear_lease => true, p_error_class => 'superseded',
                p_error => format('superseded by status version of business id %s', x.coalesce_key));
            RETURN QUERY SELECT 'not_pending'::text, NULL::bigint, NULL::integer, NULL::text, NULL::float8;
            RETURN;
        END IF;
    END IF;
    IF x.expire_at <= clock_timestamp() + interval '1 second' THEN
        why := format('expire_at %s passed before sending', x.expire_at);
        PERFORM pacer_transition(ARRAY[p_item], '{pending}', 'expired', 'ItemExpired',
            jsonb_build_object('error_class', 'expired', 'error', why), p_error_class => 'expired', p_error => why);
        why := CASE WHEN FOUND THEN 'expired' ELSE 'not_pending' END;
        RETURN QUERY SELECT why, NULL::bigint, NULL::integer, NULL::text, NULL::float8;
        RETURN;
    END IF;
    hold := pacer_hold_reason(x.job_status, x.job_reason, x.shard_status, x.shard_reason, g.reason);
    IF hold IS NULL AND x.budget_max_sends IS NOT NULL THEN
        UPDATE jobs SET budget_used = budget_used + 1
        WHERE job_id = x.job_id AND status = 'running' AND budget_used < budget_max_sends;
        IF FOUND THEN
            counted := true;
        ELSE
            PERFORM pacer_hold_job(x.job_id, 'budget_exhausted', 'system:budget');
            hold := 'job paused: budget_exhausted';
        END IF;
    END IF;
    IF hold IS NOT NULL THEN
        UPDATE items SET held = true WHERE item_id = p_item AND status = 'pending';
        RETURN QUERY SELECT 'held'::text, NULL::bigint, NULL::integer, hold, NULL::float8;
        RETURN;
    END IF;
    SELECT * INTO c FROM pacer_transition(ARRAY[p_item], '{pending}', 'claimed', 'ItemClaimed',
        jsonb_build_object('owner', p_owner), p_lease_owner => p_owner, p_lease_ttl => p_ttl);
    IF NOT FOUND THEN
        IF counted THEN
            UPDATE jobs SET budget_used = budget_used - 1 WHERE job_id = x.job_id;
        END IF;
        RETURN QUERY SELECT 'not_pending'::text, NULL::bigint, NULL::integer, NULL::text, NULL::float8;
        RETURN;
    END IF;
    -- The ledger is partitioned by item id, and a key may be another job's (a duplicate
    -- auto-reply, a ticket's status sent twice), so no index holds one row per key across
    -- partitions: a lock on the key makes the look and the reservation one step.
    PERFORM pg_advisory_xact_lock(hashtextextended(p_idem_key, 0));
    SELECT l.item_id, l.state INTO h FROM send_ledger l WHERE l.idem_key = p_idem_key LIMIT 1;
    IF NOT FOUND THEN
        INSERT INTO send_ledger (idem_key, item_id, guid, to_id, state)
        VALUES (p_idem_key, p_item, p_guid, p_to_id, 'reserved');
        h.item_id := p_item;
    END IF;
    IF h.item_id <> p_item THEN
        IF counted THEN
            UPDATE jobs SET budget_used = budget_used - 1 WHERE job_id = x.job_id;
        END IF;
        PERFORM pacer_transition(ARRAY[p_item], '{claimed}', 'abandoned', 'ItemDuplicateIntercepted',
            jsonb_build_object('idem_key', p_idem_key, 'holder', h.item_id), p_epoch => c.lease_epoch,
            p_clear_lease => true, p_error_class => 'duplicate',
            p_error => format('idempotency key already %s by item %s', h.state, h.item_id));
        RETURN QUERY SELECT 'duplicate'::text, c.lease_epoch, c.attempts, h.item_id::text, NULL::float8;
        RETURN;
    END IF;
    PERFORM pacer_transition(ARRAY[p_item], '{claimed}', 'submitted', 'ItemSubmitted',
        jsonb_build_object('attempt', c.attempts + 1, 'budgeted', counted), p_epoch => c.lease_epoch,
        p_attempt_bump => 1);
    -- The guid lease (locked above) lasts at least as long as the item's lease: the send may
    -- not outlive the lease it is made under.
    UPDATE guid_leases SET last_send_at = now(), lease_until = GREATEST(lease_until, now() + p_ttl)
    WHERE guid = p_guid;
    RETURN QUERY SELECT 'submitted'::text, c.lease_epoch, c.attempts, p_item::text, g.quiet_s;
END
$fn$;
