-- Batched begins: many items' pacer_begin_send in one statement and one transaction; each
-- result carries its input position (ord, from 1).
--
-- Locks, in this order, as every other writer of the same rows takes them: the batch's
-- budgeted jobs (job id order: a budgeted send counts on its job's row, which stays locked
-- until the batch commits, so two senders' batches with interleaved guids of two budgeted
-- jobs would otherwise take the job rows in opposite orders and deadlock), then its guid
-- leases (guid order, as the renewal, pacer_acquire_guids and pacer_confirm_many take them),
-- then items and idempotency keys.
--
-- The common case goes set-based, a handful of statements for the whole batch: an item that
-- is pending, under our live lease, held by nothing (job, shard, guid pause or lifecycle
-- state), of a job without a send budget and with no newer status version of its business
-- id, more than a second from its expire_at once the batch's locks are granted (the margin
-- pacer_begin_send applies), and whose key is in no other item's ledger row nor twice in the
-- batch. Those are claimed, their keys reserved and `submitted` written as pacer_begin_send
-- does it, event for event (claim and `submitted` as one row version).
-- Every other item (held, of a cancelled job, budgeted, superseded, about to expire, lost
-- lease, no longer pending, a duplicate key) goes through pacer_begin_send, one by one, in
-- guid then item order, which answers for it (an item of a cancelled job: abandoned,
-- 'not_pending'; superseded: abandoned, 'not_pending'; about to expire: expired, 'expired').
-- A submitted item comes with what is left of a quiet a gateway asked of its guid, as
-- pacer_begin_send gives it (quiet_s), read from the lease row as the batch's update leaves it.
DO $drop$
BEGIN
    -- The result gained quiet_s: an older definition is replaced, not altered.
    IF EXISTS (SELECT 1 FROM pg_proc
               WHERE oid = to_regprocedure('pacer_begin_send_many(uuid[], text, interval, text[], text[], text[])')
                 AND NOT 'quiet_s' = ANY(proargnames)) THEN
        DROP FUNCTION pacer_begin_send_many(uuid[], text, interval, text[], text[], text[]);
    END IF;
END
$drop$;
CREATE OR REPLACE FUNCTION pacer_begin_send_many(p_items uuid[], p_owner text, p_ttl interval, p_keys text[],
                                                 p_guids text[], p_to_ids text[])
RETURNS TABLE (ord bigint, outcome text, epoch bigint, attempts integer, holder text, quiet_s float8)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
#variable_conflict use_column
DECLARE
    r record;
    plain uuid[];
    epochs bigint[];
    tries integer[];
    begun uuid[];
    quiet_guids text[];
    quiets float8[];
    cutoff timestamptz;
BEGIN
    -- This call's commit is synchronous whatever the default (pacer_common.db.durable).
    PERFORM set_config('synchronous_commit', 'on', true);
    PERFORM 1 FROM jobs j
    WHERE j.job_id = ANY(ARRAY(SELECT i.job_id FROM items i WHERE i.item_id = ANY(p_items)))
      AND j.budget_max_sends IS NOT NULL
    ORDER BY j.job_id
    FOR NO KEY UPDATE;
    PERFORM 1 FROM guid_leases l
    WHERE l.guid = ANY(p_guids) AND l.owner = p_owner
    ORDER BY l.guid
    FOR UPDATE;
    -- Expiry is judged from here, not from the statement's start: the locks above may have
    -- been waited for.
    cutoff := clock_timestamp() + interval '1 second';

    -- The plain items, then their keys locked (guid, item order) and checked free. The
    -- batch's items are found by id alone (a fence), the status checked outside it: with
    -- "status = 'pending'" beside the ids, a plan made before the statistics knew a new
    -- partition ANDed the id lookups with a full scan of the partial index of every queued
    -- item (items_guid_queued), 30 ms to over a second a batch at 10,000 guids, growing with
    -- the backlog. Then each item's guid lease, guid state, job and shard by primary key, one
    -- probe each (LATERAL ... LIMIT 1 is never turned into a join): a join is planned for the
    -- ten-odd rows a generic plan expects of the batch, and at 500 items its nested loop
    -- compared every item with every lease or shard of the batch (250,000 pairs, half a
    -- second a batch), which let a slow moment grow the next batches and slow them more.
    WITH mine AS MATERIALIZED (
        SELECT i.item_id, i.guid, i.idem_key, i.job_id, i.shard_id, i.status, i.expire_at
        FROM items i
        WHERE i.item_id = ANY(p_items)
    )
    SELECT array_agg(m.item_id ORDER BY m.guid, m.item_id) INTO plain
    FROM mine m
    CROSS JOIN LATERAL (SELECT l.owner, l.lease_until, l.paused_reason FROM guid_leases l
                        WHERE l.guid = m.guid LIMIT 1) l
    LEFT JOIN LATERAL (SELECT gs.state, gs.reason FROM guid_states gs WHERE gs.guid = m.guid LIMIT 1) gs ON true
    CROSS JOIN LATERAL (SELECT j.status, j.paused_reason, j.budget_max_sends, j.coalesce_key, j.coalesce_version,
                               j.tenant
                        FROM jobs j WHERE j.job_id = m.job_id LIMIT 1) j
    CROSS JOIN LATERAL (SELECT s.status, s.paused_reason FROM shards s WHERE s.shard_id = m.shard_id LIMIT 1) s
    WHERE m.status = 'pending' AND l.owner = p_owner AND l.lease_until > now()
      AND m.guid = p_guids[array_position(p_items, m.item_id)]
      AND m.idem_key = p_keys[array_position(p_items, m.item_id)]
      AND cardinality(array_positions(p_keys, m.idem_key)) = 1
      AND j.budget_max_sends IS NULL
      AND (m.expire_at IS NULL OR m.expire_at > cutoff)
      AND (j.coalesce_key IS NULL OR NOT EXISTS (SELECT 1 FROM jobs n WHERE n.coalesce_key = j.coalesce_key
                                                                        AND n.tenant = j.tenant
                                                                        AND n.coalesce_version > j.coalesce_version))
      AND pacer_hold_reason(j.status, j.paused_reason, s.status::text, s.paused_reason,
                            pacer_guid_hold(l.paused_reason, gs.state::text, gs.reason)) IS NULL;
    PERFORM pg_advisory_xact_lock(hashtextextended(u.key, 0))
    FROM unnest(p_items, p_keys, p_guids) AS u(item, key, guid)
    WHERE u.item = ANY(plain)
    ORDER BY u.guid, u.item;
    SELECT array_agg(u.item) INTO plain
    FROM unnest(p_items, p_keys) AS u(item, key)
    WHERE u.item = ANY(plain) AND NOT EXISTS (SELECT 1 FROM send_ledger sl WHERE sl.idem_key = u.key);

    -- pending → claimed (new lease, epoch + 1) → submitted (attempt + 1), one row version and
    -- the two events pacer_begin_send writes; then the keys reserved.
    SELECT array_agg(c.item_id), array_agg(c.lease_epoch), array_agg(c.attempts - 1)
    INTO begun, epochs, tries
    FROM pacer_transition(plain, '{pending}', 'submitted', 'ItemSubmitted', jsonb_build_object('budgeted', false),
                          p_lease_owner => p_owner, p_lease_ttl => p_ttl, p_attempt_bump => 1,
                          p_via => 'claimed', p_via_type => 'ItemClaimed',
                          p_via_payload => jsonb_build_object('owner', p_owner)) AS c;
    INSERT INTO send_ledger (idem_key, item_id, guid, to_id, state)
    SELECT u.key, u.item, u.guid, u.to_id, 'reserved'
    FROM unnest(p_items, p_keys, p_guids, p_to_ids) AS u(item, key, guid, to_id)
    WHERE u.item = ANY(begun);
    -- The guid lease lasts at least as long as the item's lease: the send may not outlive
    -- the lease it is made under. The rows it updates give the quiets their guids keep.
    WITH touched AS (
        UPDATE guid_leases l SET last_send_at = now(), lease_until = GREATEST(l.lease_until, now() + p_ttl)
        WHERE l.guid = ANY(ARRAY(SELECT u.guid FROM unnest(p_items, p_guids) AS u(item, guid) WHERE u.item = ANY(begun)))
        RETURNING l.guid, l.gateway_quiet_until
    )
    SELECT array_agg(t.guid), array_agg(extract(epoch FROM t.gateway_quiet_until - now())::float8)
    INTO quiet_guids, quiets
    FROM touched t
    WHERE t.gateway_quiet_until > now();
    RETURN QUERY
    SELECT u.ord, 'submitted'::text, c.epoch, c.tries, u.item::text, q.quiet_s
    FROM unnest(p_items, p_guids) WITH ORDINALITY AS u(item, guid, ord)
    JOIN unnest(begun, epochs, tries) AS c(item, epoch, tries) ON c.item = u.item
    LEFT JOIN unnest(quiet_guids, quiets) AS q(guid, quiet_s) ON q.guid = u.guid
    WHERE u.item = ANY(begun);

    FOR r IN
        SELECT t.item, t.key, t.guid, t.to_id, t.ord
        FROM unnest(p_items, p_keys, p_guids, p_to_ids) WITH ORDINALITY AS t(item, key, guid, to_id, ord)
        WHERE NOT t.item = ANY(COALESCE(begun, '{}'))
        ORDER BY t.guid, t.item, t.ord
    LOOP
        RETURN QUERY SELECT r.ord, b.outcome, b.epoch, b.attempts, b.holder, b.quiet_s
                     FROM pacer_begin_send(r.item, p_owner, p_ttl, r.key, r.guid, r.to_id) AS b;
    END LOOP;
END
$fn$;
