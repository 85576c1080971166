CREATE TYPE public.guid_state AS ENUM (
    'online',
    'offline',
    'kicked',
    'unauthorized'
);

CREATE TYPE public.item_status AS ENUM (
    'pending',
    'claimed',
    'submitted',
    'confirmed',
    'failed',
    'waiting_retry',
    'abandoned',
    'expired',
    'recovery_pending',
    'unverified'
);

CREATE FUNCTION public.pacer_abandon_cancelled(p_ids uuid[], p_actor text DEFAULT NULL::text) RETURNS uuid[]
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    r record;
    gone uuid[] := '{}';
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN
        RETURN gone;
    END IF;
    FOR r IN
        SELECT COALESCE(p_actor, j.paused_by) AS actor, array_agg(i.item_id ORDER BY i.item_id) AS ids
        FROM items i JOIN jobs j ON j.job_id = i.job_id
        WHERE i.item_id = ANY(p_ids) AND i.status IN ('pending', 'waiting_retry') AND j.status = 'cancelled'
        GROUP BY i.job_id, j.paused_by
        ORDER BY i.job_id
    LOOP
        gone := gone || ARRAY(
            SELECT t.item_id
            FROM pacer_transition(r.ids, '{pending,waiting_retry}', 'abandoned', 'ItemCancelled',
                jsonb_build_object('actor', r.actor, 'error_class', 'cancelled', 'scope', 'job'),
                p_clear_lease => true, p_error_class => 'cancelled',
                p_error => format('job cancelled by %s', r.actor)) AS t);
    END LOOP;
    RETURN gone;
END
$$;

CREATE FUNCTION public.pacer_acquire_guids(p_guids text[], p_owner text, p_ttl interval, p_in_flight interval DEFAULT '00:00:00'::interval) RETURNS TABLE(guid text, epoch bigint, last_send_at timestamp with time zone, took_over boolean, db_now timestamp with time zone, windows jsonb, penalty double precision, quiet_s double precision)
    LANGUAGE plpgsql
    AS $$
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
    RETURNING g.guid, g.epoch,
              CASE WHEN g.last_answer_at >= g.last_send_at THEN g.last_answer_at
                   ELSE COALESCE(g.last_send_at + p_in_flight, g.last_answer_at) END,
              (free.prev_owner IS NOT NULL AND free.prev_owner <> p_owner), now(),
              COALESCE(g.windows, '{}'::jsonb), g.penalty,
              greatest(extract(epoch FROM g.gateway_quiet_until - now())::float8, 0);
END
$$;

CREATE FUNCTION public.pacer_after_restore(p_actor text, p_reason text, p_limit integer DEFAULT 50000) RETURNS TABLE(from_status text, n bigint)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    ids uuid[];
    why constant text := 'the database was restored from a backup: this send may have been made after the backup, '
                         'so it is verified before it is sent';
BEGIN
    SELECT array_agg(c.item_id) INTO ids FROM (
        SELECT i.item_id FROM items i
        WHERE i.status IN ('claimed', 'submitted')
           OR (i.status = 'pending' AND COALESCE(i.not_before, i.created_at) <= now())
           OR (i.status = 'waiting_retry' AND COALESCE(i.next_attempt_at, i.updated_at) <= now())
        LIMIT p_limit) c;
    IF ids IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH moved AS (
        SELECT t.item_id, t.from_status
        FROM pacer_transition(ids, '{pending,claimed,submitted,waiting_retry}', 'recovery_pending', 'ItemInDoubt',
                              jsonb_build_object('restored', true, 'actor', p_actor, 'reason', p_reason,
                                                 'source', 'after_restore', 'error_class', 'in_doubt', 'error', why),
                              p_clear_lease => true, p_error_class => 'in_doubt', p_error => why) AS t
    ), keys AS (
        INSERT INTO send_ledger (idem_key, item_id, guid, to_id, state)
        SELECT i.idem_key, i.item_id, i.guid, i.to_id, 'reserved'
        FROM items i JOIN moved m ON m.item_id = i.item_id
        WHERE NOT EXISTS (SELECT 1 FROM send_ledger l WHERE l.idem_key = i.idem_key)
        ON CONFLICT DO NOTHING
    )
    SELECT m.from_status::text, count(*) FROM moved m GROUP BY 1 ORDER BY 1;
END
$$;

CREATE FUNCTION public.pacer_approval_reason(p_total bigint, p_message jsonb, p_above bigint, p_new_content boolean) RETURNS text
    LANGUAGE plpgsql STABLE
    AS $$  -- plpgsql: bound late, so pacer_content_hash may be created after it
BEGIN
    RETURN CASE
        WHEN p_above IS NOT NULL AND p_total > p_above
            THEN format('awaiting approval: %s items, above %s', p_total, p_above)
        WHEN p_new_content AND NOT EXISTS (
                SELECT 1 FROM approved_contents a WHERE a.content_hash = pacer_content_hash(p_message))
            THEN 'awaiting approval: new content (first send of this message)'
    END;
END
$$;

CREATE FUNCTION public.pacer_audit(p_actor text, p_action text, p_type text, p_id text, p_reason text, p_before jsonb, p_after jsonb) RETURNS void
    LANGUAGE sql
    AS $$
    INSERT INTO audit_log (actor, action, target_type, target_id, reason, before, after)
    VALUES (p_actor, p_action, p_type, p_id, p_reason, p_before, p_after);
$$;

CREATE FUNCTION public.pacer_await_approval(p_job uuid, p_reason text, p_actor text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN pacer_hold_running_job(p_job, p_reason, p_actor, 'awaiting_approval', 'await_approval', true);
END
$$;

CREATE FUNCTION public.pacer_begin_send(p_item uuid, p_owner text, p_ttl interval, p_idem_key text, p_guid text, p_to_id text) RETURNS TABLE(outcome text, epoch bigint, attempts integer, holder text, quiet_s double precision)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
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
$$;

CREATE FUNCTION public.pacer_begin_send_many(p_items uuid[], p_owner text, p_ttl interval, p_keys text[], p_guids text[], p_to_ids text[]) RETURNS TABLE(ord bigint, outcome text, epoch bigint, attempts integer, holder text, quiet_s double precision)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
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
$$;

CREATE FUNCTION public.pacer_cancel_item(p_item uuid, p_actor text) RETURNS TABLE(outcome text, message text)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
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
$$;

CREATE FUNCTION public.pacer_check_limits_timezone() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.limits ? 'timezone' AND NOT EXISTS (SELECT 1 FROM pg_timezone_names z WHERE z.name = NEW.limits ->> 'timezone') THEN
        RAISE EXCEPTION 'time zone % is not one this database knows: use an IANA name such as Asia/Shanghai',
            NEW.limits -> 'timezone' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION public.pacer_check_tenant_timezone() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.timezone IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_timezone_names z WHERE z.name = NEW.timezone) THEN
        RAISE EXCEPTION 'time zone % is not one this database knows: use an IANA name such as Asia/Shanghai',
            to_jsonb(NEW.timezone) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION public.pacer_coalesce(p_job uuid) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    j jobs%ROWTYPE;
    ids uuid[];
BEGIN
    SELECT * INTO j FROM jobs WHERE job_id = p_job;
    IF j.coalesce_key IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('pacer.coalesce:' || j.tenant || ':' || j.coalesce_key));
    SELECT array_agg(i.item_id) INTO ids
    FROM items i JOIN jobs o ON o.job_id = i.job_id
    WHERE o.coalesce_key = j.coalesce_key AND o.tenant = j.tenant AND i.status IN ('pending', 'waiting_retry')
      AND (o.coalesce_version < j.coalesce_version
           OR (o.job_id = p_job AND EXISTS (SELECT 1 FROM jobs n WHERE n.coalesce_key = j.coalesce_key
                                                                 AND n.tenant = j.tenant
                                                                 AND n.coalesce_version > j.coalesce_version)));
    IF ids IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM pacer_transition(ids, '{pending,waiting_retry}', 'abandoned', 'ItemSuperseded',
        jsonb_build_object('business_id', j.coalesce_key, 'by_version', j.coalesce_version, 'error_class', 'superseded'),
        p_clear_lease => true, p_error_class => 'superseded',
        p_error => format('superseded by status version of business id %s', j.coalesce_key));
    RETURN cardinality(ids);
END
$$;

CREATE FUNCTION public.pacer_compensate(p_item uuid, p_actor text, p_priority smallint DEFAULT NULL::smallint) RETURNS TABLE(outcome text, new_item uuid, message text)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
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
$$;

CREATE FUNCTION public.pacer_confirm_budget(p_job uuid, p_max_sends bigint, p_actor text) RETURNS TABLE(outcome text, message text, status text)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    j jobs%ROWTYPE;
    resumed boolean := false;
BEGIN
    SELECT * INTO j FROM jobs WHERE job_id = p_job FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, format('no job %s', p_job), NULL::text;
        RETURN;
    END IF;
    IF p_max_sends <= j.budget_used THEN
        RETURN QUERY SELECT 'conflict'::text, format('a budget of %s sends is not above the %s already used',
                                                     p_max_sends, j.budget_used), j.status;
        RETURN;
    END IF;
    UPDATE jobs SET budget_max_sends = p_max_sends WHERE job_id = p_job;
    IF j.status = 'paused' AND j.paused_reason = 'budget_exhausted' AND j.paused_by = 'system:budget' THEN
        UPDATE jobs SET status = 'running', paused_reason = NULL, paused_by = NULL, paused_at = NULL
        WHERE job_id = p_job;
        resumed := true;
    END IF;
    PERFORM pacer_audit(p_actor, 'confirm_budget', 'job', p_job::text, NULL,
        jsonb_build_object('budget_max_sends', j.budget_max_sends, 'budget_used', j.budget_used, 'status', j.status),
        jsonb_build_object('budget_max_sends', p_max_sends, 'status', CASE WHEN resumed THEN 'running' ELSE j.status END));
    RETURN QUERY SELECT 'done'::text,
        format('budget set to %s sends (%s used)%s', p_max_sends, j.budget_used,
               CASE WHEN resumed THEN '; job resumed' ELSE '' END),
        CASE WHEN resumed THEN 'running' ELSE j.status END;
END
$$;

CREATE FUNCTION public.pacer_confirm_many(p_items uuid[], p_epochs bigint[], p_keys text[], p_receipts jsonb[]) RETURNS TABLE(ord bigint, moved boolean)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
#variable_conflict use_column
DECLARE
    done uuid[];
BEGIN
    -- This call's commit is synchronous whatever the default (pacer_common.db.durable).
    PERFORM set_config('synchronous_commit', 'on', true);
    PERFORM 1 FROM guid_leases l
    WHERE l.guid = ANY(ARRAY(SELECT i.guid FROM items i WHERE i.item_id = ANY(p_items)))
    ORDER BY l.guid
    FOR NO KEY UPDATE;
    SELECT array_agg(c.item_id) INTO done
    FROM pacer_transition(p_items, '{submitted}', 'confirmed', 'ItemConfirmed', p_clear_lease => true,
        p_epochs => p_epochs,
        p_payloads => ARRAY(SELECT jsonb_build_object('receipt', u.r)
                            FROM unnest(p_receipts) WITH ORDINALITY AS u(r, n) ORDER BY u.n)) AS c;
    -- By both columns of the ledger's key (idem_key first): with item_id alone, a plan made
    -- before the statistics knew the ledger read the whole key index for each batch. An
    -- item's key and receipt are found by its position in p_items, not by a join with the
    -- list: planned for the ten-odd rows a generic plan expects, the join compared every
    -- ledger row with every entry (250,000 pairs for a batch of 500).
    UPDATE send_ledger l SET state = 'sent', receipt = p_receipts[array_position(p_items, l.item_id)],
                             sent_at = now()
    WHERE l.idem_key = ANY(p_keys) AND l.item_id = ANY(done)
      AND l.idem_key = p_keys[array_position(p_items, l.item_id)];
    UPDATE guid_leases l SET last_answer_at = clock_timestamp()
    WHERE l.guid = ANY(ARRAY(SELECT i.guid FROM items i WHERE i.item_id = ANY(done)));
    RETURN QUERY
    SELECT t.ord, t.item = ANY(COALESCE(done, '{}'))
    FROM unnest(p_items) WITH ORDINALITY AS t(item, ord);
END
$$;

CREATE FUNCTION public.pacer_content_hash(p_message jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT md5(p_message::text) $$;

CREATE FUNCTION public.pacer_count_send_windows() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    e double precision := extract(epoch FROM NEW.last_send_at);
    w jsonb := COALESCE(OLD.windows, '{}');
    m bigint := floor(e / 60);
    h bigint := floor(e / 3600);
    d jsonb := w -> 'day';
    tz text;
    local_at timestamp;
BEGIN
    IF NEW.last_send_at IS NULL OR NEW.last_send_at IS NOT DISTINCT FROM OLD.last_send_at THEN
        RETURN NEW;
    END IF;
    IF (d ->> 2)::float8 > e THEN
        d := jsonb_build_array(d -> 0, (d ->> 1)::bigint + 1, d -> 2);
    ELSE
        SELECT COALESCE(max(gl.limits ->> 'timezone') FILTER (WHERE gl.guid = NEW.guid),
                        max(gl.limits ->> 'timezone') FILTER (WHERE gl.guid = '*'))
        INTO tz FROM guid_limits gl WHERE gl.guid IN (NEW.guid, '*');
        tz := COALESCE(tz, NULLIF(current_setting('pacer.timezone', true), ''), 'Asia/Shanghai');
        local_at := NEW.last_send_at AT TIME ZONE tz;
        d := jsonb_build_array(floor(extract(epoch FROM local_at) / 86400)::bigint,
                 CASE WHEN COALESCE((d ->> 2)::float8, ((d ->> 0)::bigint + 1) * 86400.0)
                           > extract(epoch FROM pacer_local_time(date_trunc('day', local_at), tz))
                      THEN (d ->> 1)::bigint + 1 ELSE 1 END,
                 extract(epoch FROM pacer_local_time(date_trunc('day', local_at) + interval '1 day', tz))::bigint);
    END IF;
    NEW.windows := jsonb_build_object(
        'minute', jsonb_build_array(m, CASE WHEN (w -> 'minute' ->> 0)::bigint = m
                                            THEN (w -> 'minute' ->> 1)::bigint + 1 ELSE 1 END, (m + 1) * 60),
        'hour', jsonb_build_array(h, CASE WHEN (w -> 'hour' ->> 0)::bigint = h
                                          THEN (w -> 'hour' ->> 1)::bigint + 1 ELSE 1 END, (h + 1) * 3600),
        'day', d);
    RETURN NEW;
END
$$;

CREATE FUNCTION public.pacer_create_partition(p_parent text, p_starts timestamp with time zone, p_ends timestamp with time zone, p_lock_timeout interval DEFAULT '00:00:02'::interval) RETURNS TABLE(partition text, action text, detail text)
    LANGUAGE plpgsql
    AS $_$
DECLARE
    t partitioned_tables;
    lo text;
    hi text;
    name text;
    ddl text;
    moved bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('pacer_partitions'));
    PERFORM set_config('lock_timeout', (extract(epoch FROM p_lock_timeout) * 1000)::bigint::text, true);
    SELECT * INTO STRICT t FROM partitioned_tables WHERE parent = p_parent;
    IF EXISTS (SELECT 1 FROM pacer_partitions(p_parent) p WHERE p.starts < p_ends AND p.ends > p_starts) THEN
        RETURN;
    END IF;
    name := p_parent || '_p' || to_char(p_starts AT TIME ZONE 'UTC', 'YYYYMMDD');
    IF t.bound = 'item_id' THEN
        lo := quote_literal(pacer_uuid7_floor(p_starts));
        hi := quote_literal(pacer_uuid7_floor(p_ends));
    ELSE
        lo := quote_literal(p_starts);
        hi := quote_literal(p_ends);
    END IF;
    BEGIN
        -- The default partition locked before its rows are moved, as the ATTACH locks it
        -- (ACCESS EXCLUSIVE): a write of the period uncommitted during the move would otherwise
        -- stay behind in it, and the ATTACH's check of the default's rows fail on it. That lock
        -- at once, not a weaker one raised later: a session reading the default that then
        -- wrote to it would wait for this one while this one waited for its read (a deadlock).
        IF to_regclass(p_parent || '_default') IS NOT NULL THEN
            EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', p_parent || '_default');
        END IF;
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)',
                       name, p_parent);
        EXECUTE format('WITH m AS (DELETE FROM %1$I WHERE %2$I >= %3$s AND %2$I < %4$s RETURNING *) '
                       'INSERT INTO %5$I SELECT * FROM m', p_parent || '_default', t.key_column, lo, hi, name);
        GET DIAGNOSTICS moved = ROW_COUNT;
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', p_parent, name, lo, hi);
        FOREACH ddl IN ARRAY t.local_ddl LOOP
            EXECUTE format(ddl, name);
        END LOOP;
        RETURN QUERY SELECT name, 'created'::text,
            CASE WHEN moved > 0 THEN format('%s rows moved from the default partition', moved) END;
    EXCEPTION WHEN lock_not_available THEN
        RETURN QUERY SELECT name, 'skipped'::text, SQLERRM;
    END;
END
$_$;

CREATE FUNCTION public.pacer_decide_approval(p_job uuid, p_approve boolean, p_actor text, p_reason text) RETURNS TABLE(outcome text, message text, status text)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    j jobs%ROWTYPE;
    after_status text;
BEGIN
    SELECT * INTO j FROM jobs WHERE job_id = p_job FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, format('no job %s', p_job), NULL::text;
        RETURN;
    END IF;
    IF j.status <> 'awaiting_approval' THEN
        RETURN QUERY SELECT 'conflict'::text, format('job is %s, not awaiting approval', j.status), j.status;
        RETURN;
    END IF;
    IF p_approve THEN
        UPDATE jobs SET status = CASE WHEN pacer_job_open(p_job) THEN 'running' ELSE 'completed' END,
                        finished_at = CASE WHEN pacer_job_open(p_job) THEN NULL ELSE now() END,
                        paused_reason = NULL, paused_by = NULL, paused_at = NULL,
                        approved_at = now(), approved_by = p_actor
        WHERE job_id = p_job
        RETURNING status INTO after_status;
    END IF;
    PERFORM pacer_audit(p_actor, CASE WHEN p_approve THEN 'approve' ELSE 'reject' END, 'job', p_job::text, p_reason,
        jsonb_build_object('status', j.status, 'paused_reason', j.paused_reason),
        jsonb_build_object('status', CASE WHEN p_approve THEN after_status ELSE 'cancelled' END));
    IF p_approve THEN
        INSERT INTO approved_contents (content_hash, approved_by, job_id)
        VALUES (pacer_content_hash(j.message), p_actor, p_job) ON CONFLICT DO NOTHING;
        RETURN QUERY SELECT 'done'::text, CASE WHEN after_status = 'completed'
            THEN 'job approved: awaiting_approval → completed; nothing of it was left to send (its items '
                 'expired while it waited)'
            ELSE 'job approved: awaiting_approval → running; it starts sending'
                 || CASE WHEN j.target_mode = 'requery' THEN ' and goes on paging, without asking again' ELSE '' END
            END, after_status;
    ELSE
        PERFORM pacer_job_action(p_job, 'cancel', p_actor, COALESCE(p_reason, 'rejected'));
        RETURN QUERY SELECT 'done'::text, 'job rejected: awaiting_approval → cancelled; '
            || CASE WHEN j.target_mode = 'requery' THEN 'nothing more of it is sent' ELSE 'nothing was sent' END,
            'cancelled'::text;
    END IF;
END
$$;

CREATE FUNCTION public.pacer_ensure_partitions(p_now timestamp with time zone, p_ahead_days integer, p_lock_timeout interval DEFAULT '00:00:02'::interval) RETURNS TABLE(partition text, action text, detail text)
    LANGUAGE plpgsql
    AS $$
DECLARE
    m record;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('pacer_partitions'));
    FOR m IN SELECT * FROM pacer_partitions_missing(p_now, p_ahead_days) LOOP
        RETURN QUERY SELECT * FROM pacer_create_partition(m.parent, m.starts, m.ends, p_lock_timeout);
    END LOOP;
    RETURN QUERY SELECT * FROM pacer_grant_partitions();
END
$$;

CREATE FUNCTION public.pacer_force_release_guid(p_guid text, p_actor text, p_reason text DEFAULT NULL::text, p_expected_owner text DEFAULT NULL::text, p_expected_epoch bigint DEFAULT NULL::bigint) RETURNS TABLE(outcome text, message text, previous_owner text, epoch bigint, evicted_until timestamp with time zone, in_flight integer)
    LANGUAGE plpgsql
    AS $$
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
    IF (p_expected_owner IS NOT NULL AND l.owner <> p_expected_owner)
       OR (p_expected_epoch IS NOT NULL AND l.epoch <> p_expected_epoch) THEN
        RETURN QUERY SELECT 'conflict'::text,
            format('not released: guid %s is held by %s (epoch %s) now, not by %s as confirmed; the lease changed '
                   'hands since. Look at the lease again and release it only if this holder is stuck',
                   p_guid, l.owner, l.epoch,
                   concat_ws(' ', p_expected_owner, '(epoch ' || p_expected_epoch || ')')),
            l.owner, l.epoch, l.evicted_until, 0;
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
$$;

CREATE FUNCTION public.pacer_force_release_item(p_item uuid, p_actor text, p_reason text DEFAULT NULL::text, p_expected_owner text DEFAULT NULL::text, p_expected_epoch bigint DEFAULT NULL::bigint) RETURNS TABLE(outcome text, message text, from_status text, to_status text, epoch bigint)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
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
    IF o.status IN ('claimed', 'submitted') AND (
           (p_expected_owner IS NOT NULL AND o.lease_owner IS DISTINCT FROM p_expected_owner)
           OR (p_expected_epoch IS NOT NULL AND o.lease_epoch <> p_expected_epoch)) THEN
        RETURN QUERY SELECT 'conflict'::text,
            format('not released: item %s is %s under the lease of %s (epoch %s) now, not of %s as confirmed; '
                   'look at it again', p_item, o.status, o.lease_owner, o.lease_epoch,
                   concat_ws(' ', p_expected_owner, '(epoch ' || p_expected_epoch || ')')),
            o.status::text, o.status::text, o.lease_epoch;
        RETURN;
    END IF;
    IF o.status = 'claimed' THEN
        PERFORM pacer_transition(ARRAY[p_item], '{claimed}', 'pending', 'ItemLeaseExpired',
            jsonb_build_object('reason', why, 'forced', true, 'actor', p_actor), p_clear_lease => true);
    ELSIF o.status = 'submitted' THEN
        PERFORM pacer_transition(ARRAY[p_item], '{submitted}', 'recovery_pending', 'ItemInDoubt',
            jsonb_build_object('reason', why, 'forced', true, 'actor', p_actor, 'verify_from', o.lease_until,
                               'source', 'forced_release', 'error_class', 'in_doubt', 'error', why),
            p_error_class => 'in_doubt', p_error => why);
    ELSE
        RETURN QUERY SELECT 'conflict'::text,
            format('item %s is %s and holds no lease (only claimed or submitted items do)', p_item, o.status),
            o.status::text, o.status::text, o.lease_epoch;
        RETURN;
    END IF;
    UPDATE items SET lease_epoch = lease_epoch + 1, lease_owner = NULL WHERE item_id = p_item;
    PERFORM pacer_audit(p_actor, 'release_lock', 'item', p_item::text, p_reason,
        jsonb_build_object('status', o.status, 'lease_owner', o.lease_owner, 'lease_epoch', o.lease_epoch,
                           'lease_until', o.lease_until),
        jsonb_build_object('status', CASE WHEN o.status = 'claimed' THEN 'pending' ELSE 'recovery_pending' END,
                           'lease_owner', NULL, 'lease_epoch', o.lease_epoch + 1,
                           'lease_until', CASE WHEN o.status = 'submitted' THEN o.lease_until END));
    RETURN QUERY SELECT 'done'::text,
        CASE WHEN o.status = 'claimed'
             THEN format('item %s released: claimed by %s, nothing was sent; it is pending again (epoch %s)',
                         p_item, o.lease_owner, o.lease_epoch + 1)
             ELSE format('item %s released: it was submitted by %s and may have been sent, so it is '
                         'recovery_pending and will be verified with the gateway, never resent blindly, once '
                         'its lease would have run out (%s), as a send made under it may still arrive (epoch %s)',
                         p_item, o.lease_owner, o.lease_until, o.lease_epoch + 1) END,
        o.status::text, CASE WHEN o.status = 'claimed' THEN 'pending' ELSE 'recovery_pending' END,
        o.lease_epoch + 1;
END
$$;

CREATE FUNCTION public.pacer_grant_partitions() RETURNS TABLE(partition text, action text, detail text)
    LANGUAGE plpgsql
    AS $$
DECLARE
    t record;
    g record;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('pacer_partitions'));
    FOR t IN SELECT * FROM partitioned_tables ORDER BY prune_order, parent LOOP
        FOR g IN
            SELECT p.relname::text AS part, a.grantee, a.is_grantable,
                   string_agg(a.privilege_type, ', ' ORDER BY a.privilege_type) AS privileges
            FROM pg_inherits i
            JOIN pg_class par ON par.oid = i.inhparent
            JOIN pg_class p ON p.oid = i.inhrelid
            CROSS JOIN LATERAL aclexplode(par.relacl) a
            WHERE i.inhparent = to_regclass(t.parent)
              AND a.grantee <> p.relowner
              AND pg_has_role(p.relowner, 'USAGE')
              AND NOT EXISTS (SELECT 1 FROM aclexplode(p.relacl) b
                              WHERE b.grantee = a.grantee AND b.privilege_type = a.privilege_type
                                AND (b.is_grantable OR NOT a.is_grantable))
            GROUP BY p.relname, a.grantee, a.is_grantable
            ORDER BY p.relname, a.grantee
        LOOP
            EXECUTE format('GRANT %s ON %I TO %s%s', g.privileges, g.part,
                           CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(g.grantee)) END,
                           CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
            RETURN QUERY SELECT g.part, 'granted'::text,
                format('%s to %s%s, as on %s', g.privileges,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(g.grantee)::text END,
                       CASE WHEN g.is_grantable THEN ' with grant option' ELSE '' END, t.parent);
        END LOOP;
    END LOOP;
END
$$;

CREATE FUNCTION public.pacer_guard_requery_completion() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.target_mode = 'requery' AND (NEW.target_complete_at IS NULL OR EXISTS (
            SELECT 1 FROM items i
            WHERE i.job_id = NEW.job_id
              AND i.status IN ('pending', 'claimed', 'submitted', 'waiting_retry', 'recovery_pending'))) THEN
        NEW.status := 'running';
        NEW.finished_at := NULL;
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION public.pacer_guid_crc(p_guid text) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT crc32(convert_to(p_guid, 'UTF8')) $$;

CREATE FUNCTION public.pacer_guid_hold(p_paused_reason text, p_state text, p_state_reason text) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE
        WHEN p_paused_reason IS NOT NULL THEN 'paused: ' || p_paused_reason
        WHEN p_state IS NOT NULL AND p_state <> 'online' THEN p_state || COALESCE(': ' || p_state_reason, '')
    END;
$$;

CREATE FUNCTION public.pacer_hold_guid(p_guid text, p_reason text, p_actor text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO guid_leases (guid) VALUES (p_guid) ON CONFLICT DO NOTHING;
    UPDATE guid_leases SET paused_reason = p_reason, paused_by = p_actor, paused_at = now()
    WHERE guid = p_guid AND paused_reason IS NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pacer_audit(p_actor, 'pause', 'guid', p_guid, p_reason, jsonb_build_object('paused', false),
                        jsonb_build_object('paused', true, 'paused_reason', p_reason));
    RETURN true;
END
$$;

CREATE FUNCTION public.pacer_hold_job(p_job uuid, p_reason text, p_actor text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN pacer_hold_running_job(p_job, p_reason, p_actor, 'paused', 'pause', false);
END
$$;

CREATE FUNCTION public.pacer_hold_reason(p_job_status text, p_job_reason text, p_shard_status text, p_shard_reason text, p_guid_reason text) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE
        WHEN p_job_status <> 'running' THEN 'job ' || p_job_status || COALESCE(': ' || p_job_reason, '')
        WHEN p_shard_status = 'paused' THEN 'shard paused' || COALESCE(': ' || p_shard_reason, '')
        WHEN p_guid_reason IS NOT NULL THEN 'guid ' || p_guid_reason
    END;
$$;

CREATE FUNCTION public.pacer_hold_running_job(p_job uuid, p_reason text, p_actor text, p_status text, p_action text, p_unapproved boolean) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE jobs SET status = p_status, paused_reason = p_reason, paused_by = p_actor, paused_at = now()
    WHERE job_id = p_job AND status = 'running' AND (NOT p_unapproved OR approved_at IS NULL);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pacer_audit(p_actor, p_action, 'job', p_job::text, p_reason,
                        jsonb_build_object('status', 'running'),
                        jsonb_build_object('status', p_status, 'paused_reason', p_reason));
    RETURN true;
END
$$;

CREATE FUNCTION public.pacer_hour_rate(p_windows jsonb) RETURNS double precision
    LANGUAGE sql STABLE
    AS $$
    SELECT CASE WHEN (p_windows -> 'hour' ->> 0)::bigint = floor(extract(epoch FROM now()) / 3600)
                THEN (p_windows -> 'hour' ->> 1)::float8
                     / greatest(60, extract(epoch FROM now()) - floor(extract(epoch FROM now()) / 3600) * 3600)
           END;
$$;

CREATE TABLE public.items (
    item_id uuid NOT NULL,
    job_id uuid NOT NULL,
    shard_id bigint NOT NULL,
    guid text NOT NULL,
    to_id text NOT NULL,
    content text,
    idem_key text NOT NULL,
    priority smallint NOT NULL,
    kind text NOT NULL,
    status public.item_status DEFAULT 'pending'::public.item_status NOT NULL,
    version integer DEFAULT 0 NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    lease_owner text,
    lease_epoch bigint DEFAULT 0 NOT NULL,
    lease_until timestamp with time zone,
    expire_at timestamp with time zone,
    not_before timestamp with time zone,
    next_attempt_at timestamp with time zone,
    last_error_class text,
    last_error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    compensates uuid,
    held boolean DEFAULT false NOT NULL,
    target_page integer,
    traceparent text
)
PARTITION BY RANGE (item_id);

CREATE FUNCTION public.pacer_item_command(i public.items) RETURNS TABLE(item_id text, job_id text, shard_id bigint, guid text, to_id text, content text, idem_key text, priority smallint, kind text, expire_at timestamp with time zone, not_before timestamp with time zone, created_at timestamp with time zone, traceparent text, tenant text)
    LANGUAGE sql STABLE ROWS 1
    AS $$
    SELECT i.item_id::text, i.job_id::text, i.shard_id, i.guid, i.to_id,
           -- NULL on the item: its job's common content (read only then)
           COALESCE(i.content, (SELECT j.item_content FROM jobs j WHERE j.job_id = i.job_id)),
           i.idem_key, i.priority, i.kind, i.expire_at, i.not_before, i.created_at, i.traceparent,
           (SELECT j.tenant FROM jobs j WHERE j.job_id = i.job_id);  -- an item's tenant is its job's
$$;

CREATE FUNCTION public.pacer_item_id(p_at timestamp with time zone) RETURNS uuid
    LANGUAGE sql PARALLEL SAFE
    AS $$
    SELECT (lpad(to_hex(floor(extract(epoch FROM p_at) * 1000)::bigint), 12, '0') || '7'
            || substr(replace(gen_random_uuid()::text, '-', ''), 14))::uuid
$$;

CREATE FUNCTION public.pacer_item_id_time(p_id uuid) RETURNS timestamp with time zone
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT to_timestamp(('x' || replace(left(p_id::text, 13), '-', ''))::bit(48)::bigint / 1000.0)
$$;

CREATE FUNCTION public.pacer_job_action(p_job uuid, p_action text, p_actor text, p_reason text DEFAULT NULL::text) RETURNS TABLE(outcome text, message text, status text)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    j jobs%ROWTYPE;
    n bigint;
    ids uuid[];
    after_status text;
    msg text;
    answer text := 'done';
BEGIN
    SELECT * INTO j FROM jobs WHERE job_id = p_job FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, format('no job %s', p_job), NULL::text;
        RETURN;
    END IF;
    IF p_action = 'pause' THEN
        IF j.status = 'paused' THEN
            RETURN QUERY SELECT 'noop'::text, format('job is already paused (%s)', j.paused_reason), j.status;
            RETURN;
        ELSIF j.status <> 'running' THEN
            RETURN QUERY SELECT 'conflict'::text, format('job is %s; only a running job can be paused', j.status), j.status;
            RETURN;
        END IF;
        UPDATE jobs SET status = 'paused', paused_reason = COALESCE(p_reason, 'operator'), paused_by = p_actor,
                        paused_at = now()
        WHERE job_id = p_job;
    ELSIF p_action = 'resume' THEN
        IF j.status = 'running' THEN
            RETURN QUERY SELECT 'noop'::text, 'job is already running'::text, j.status;
            RETURN;
        ELSIF j.status NOT IN ('paused', 'terminated') THEN
            RETURN QUERY SELECT 'conflict'::text, format('job is %s and cannot be resumed', j.status), j.status;
            RETURN;
        END IF;
        IF j.status = 'terminated' THEN
            SELECT count(*) INTO n FROM items i
            WHERE i.job_id = p_job AND i.status IN ('claimed', 'submitted', 'recovery_pending');
            IF n > 0 THEN
                RETURN QUERY SELECT 'conflict'::text, format('job was terminated and %s of its items are still in '
                    'flight or in doubt; it can be resumed once the reconciler has settled them', n), j.status;
                RETURN;
            END IF;
        END IF;
        IF j.budget_max_sends IS NOT NULL AND j.budget_used >= j.budget_max_sends THEN
            RETURN QUERY SELECT 'conflict'::text, format('budget exhausted (%s of %s sends used): an admin must '
                'confirm a larger budget first', j.budget_used, j.budget_max_sends), j.status;
            RETURN;
        END IF;
        after_status := CASE WHEN pacer_job_open(p_job) THEN 'running' ELSE 'completed' END;
        UPDATE jobs SET status = after_status, paused_reason = NULL, paused_by = NULL, paused_at = NULL,
                        finished_at = CASE WHEN after_status = 'completed' THEN now() END
        WHERE job_id = p_job;
    ELSIF p_action = 'cancel' THEN
        IF j.status = 'completed' THEN
            RETURN QUERY SELECT 'conflict'::text, 'job is completed; there is nothing left to cancel'::text, j.status;
            RETURN;
        END IF;
        SELECT array_agg(i.item_id) INTO ids FROM items i
        WHERE i.job_id = p_job AND i.status IN ('pending', 'waiting_retry');
        IF j.status = 'cancelled' AND ids IS NULL THEN
            RETURN QUERY SELECT 'noop'::text, 'job is already cancelled'::text, j.status;
            RETURN;
        ELSIF j.status <> 'cancelled' THEN
            UPDATE jobs SET status = 'cancelled', finished_at = now(),
                            paused_reason = COALESCE(p_reason, 'cancelled'), paused_by = p_actor, paused_at = now()
            WHERE job_id = p_job;
        END IF;
        -- Cancelled again: what came back to waiting since (an item that was in flight) is
        -- abandoned now; the job's row is left as the first cancel wrote it.
        ids := pacer_abandon_cancelled(ids, p_actor);
        IF j.status = 'cancelled' AND cardinality(ids) = 0 THEN  -- each taken or abandoned meanwhile
            RETURN QUERY SELECT 'noop'::text, 'job is already cancelled'::text, j.status;
            RETURN;
        ELSIF j.status = 'cancelled' THEN  -- done (items changed), the job's status as it was
            msg := format('job was already cancelled; %s of its items had come back to pending or waiting_retry '
                          'since and are abandoned now', cardinality(ids));
        END IF;
    ELSIF p_action = 'terminate' THEN
        IF j.status = 'terminated' THEN
            RETURN QUERY SELECT 'noop'::text, 'job is already terminated'::text, j.status;
            RETURN;
        ELSIF j.status NOT IN ('running', 'paused') THEN
            RETURN QUERY SELECT 'conflict'::text, format('job is %s; only a running or paused job can be terminated',
                j.status), j.status;
            RETURN;
        END IF;
        UPDATE jobs SET status = 'terminated', paused_reason = COALESCE(p_reason, 'terminated'), paused_by = p_actor,
                        paused_at = now()
        WHERE job_id = p_job;
    ELSE
        RAISE EXCEPTION 'unknown job action %', p_action USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT jobs.status INTO after_status FROM jobs WHERE job_id = p_job;
    PERFORM pacer_audit(p_actor, p_action, 'job', p_job::text, p_reason,
        jsonb_build_object('status', j.status, 'paused_reason', j.paused_reason),
        (SELECT jsonb_build_object('status', x.status, 'paused_reason', x.paused_reason,
                                   'abandoned', COALESCE(cardinality(ids), 0))
         FROM jobs x WHERE x.job_id = p_job));
    RETURN QUERY SELECT answer, COALESCE(msg, format('job %s: %s → %s', p_action, j.status, after_status)),
                        after_status;
END
$$;

CREATE FUNCTION public.pacer_job_open(p_job uuid, p_shard bigint DEFAULT NULL::bigint) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT EXISTS (
        SELECT 1 FROM items i
        WHERE i.job_id = p_job AND (p_shard IS NULL OR i.shard_id = p_shard)
          AND i.status IN ('pending', 'claimed', 'submitted', 'waiting_retry', 'recovery_pending'))
$$;

CREATE FUNCTION public.pacer_local_time(p_local timestamp without time zone, p_tz text) RETURNS timestamp with time zone
    LANGUAGE sql STABLE
    AS $$
    SELECT CASE WHEN ((t - interval '1 hour') AT TIME ZONE p_tz) >= p_local THEN t - interval '1 hour' ELSE t END
    FROM (SELECT p_local AT TIME ZONE p_tz AS t) AS later;
$$;

CREATE FUNCTION public.pacer_partition_writer() RETURNS void
    LANGUAGE sql
    AS $$
    SELECT pg_advisory_xact_lock_shared(hashtext('pacer_partitions'))
$$;

CREATE FUNCTION public.pacer_partitions(p_parent text) RETURNS TABLE(partition text, starts timestamp with time zone, ends timestamp with time zone)
    LANGUAGE sql STABLE
    AS $_$
    SELECT c.relname::text,
           CASE t.bound WHEN 'item_id' THEN pacer_item_id_time(b[1]::uuid) ELSE b[1]::timestamptz END,
           CASE t.bound WHEN 'item_id' THEN pacer_item_id_time(b[2]::uuid) ELSE b[2]::timestamptz END
    FROM partitioned_tables t
    JOIN pg_inherits h ON h.inhparent = to_regclass(t.parent)
    JOIN pg_class c ON c.oid = h.inhrelid
    CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid), $re$FROM \('([^']+)'\) TO \('([^']+)'\)$re$) AS b
    WHERE t.parent = p_parent AND c.relname ~ ('^' || t.parent || '_p[0-9]{8}$')
    ORDER BY 2
$_$;

CREATE FUNCTION public.pacer_partitions_due(p_now timestamp with time zone, p_retain_days jsonb) RETURNS TABLE(partition text, action text, detail text)
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    t record;
    filled boolean;
BEGIN
    FOR t IN SELECT * FROM partitioned_tables ORDER BY prune_order, parent LOOP
        IF to_regclass(t.parent || '_default') IS NOT NULL THEN
            EXECUTE format('SELECT EXISTS (SELECT FROM %I)', t.parent || '_default') INTO filled;
            IF filled THEN
                RETURN QUERY SELECT t.parent || '_default', 'default'::text, 'holds rows'::text;
            END IF;
        END IF;
        CONTINUE WHEN NOT p_retain_days ? t.parent;
        RETURN QUERY SELECT x.partition, 'due'::text, NULL::text FROM pacer_partitions(t.parent) x
                     WHERE x.ends + make_interval(secs => (p_retain_days->>t.parent)::int * 86400) <= p_now
                     ORDER BY x.starts;
    END LOOP;
END
$$;

CREATE FUNCTION public.pacer_partitions_missing(p_now timestamp with time zone, p_ahead_days integer) RETURNS TABLE(parent text, starts timestamp with time zone, ends timestamp with time zone)
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    t record;
    d timestamptz;
    c timestamptz;
    upto timestamptz;
    held timestamptz;
    period interval;
BEGIN
    FOR t IN SELECT * FROM partitioned_tables ORDER BY prune_order, partitioned_tables.parent LOOP
        -- Periods are whole UTC days from the epoch; in seconds, so that no session time zone's
        -- daylight saving moves a boundary.
        period := make_interval(secs => t.period_days * 86400);
        d := to_timestamp((floor((floor(extract(epoch FROM p_now) / 86400) - 1) / t.period_days)
                           * t.period_days * 86400)::bigint);
        WHILE d <= p_now + make_interval(secs => p_ahead_days * 86400) LOOP
            c := d;
            WHILE c < d + period LOOP
                SELECT p.ends INTO held FROM pacer_partitions(t.parent) p WHERE p.starts <= c AND p.ends > c;
                IF held IS NOT NULL THEN  -- a partition holds c already: on from its end
                    c := held;
                    CONTINUE;
                END IF;
                SELECT COALESCE(min(p.starts), d + period) INTO upto
                FROM pacer_partitions(t.parent) p WHERE p.starts > c AND p.starts < d + period;
                RETURN QUERY SELECT t.parent, c, upto;
                c := upto;
            END LOOP;
            d := d + period;
        END LOOP;
    END LOOP;
END
$$;

CREATE FUNCTION public.pacer_prune_jobs(p_before timestamp with time zone, p_limit integer DEFAULT 1000) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    ids uuid[];
    events_kept tstzrange[] := ARRAY(SELECT tstzrange(p.starts, p.ends) FROM pacer_partitions('item_events') p);
BEGIN
    SELECT array_agg(x.job_id) INTO ids FROM (
        SELECT j.job_id FROM jobs j
        WHERE j.created_at < p_before AND j.status IN ('completed', 'cancelled', 'terminated')
          AND NOT EXISTS (SELECT 1 FROM items i WHERE i.job_id = j.job_id)
          AND NOT j.created_at <@ ANY(events_kept)
          AND NOT EXISTS (SELECT 1 FROM jobs o WHERE o.coalesce_key = j.coalesce_key AND o.tenant = j.tenant
                                                 AND o.coalesce_version < j.coalesce_version
                                                 AND EXISTS (SELECT 1 FROM items i WHERE i.job_id = o.job_id))
        ORDER BY j.created_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ) x;
    IF ids IS NULL THEN
        RETURN 0;
    END IF;
    DELETE FROM shard_status_counts c USING shards s WHERE c.shard_id = s.shard_id AND s.job_id = ANY(ids);
    DELETE FROM shards WHERE job_id = ANY(ids);
    DELETE FROM job_target_pages WHERE job_id = ANY(ids);
    DELETE FROM jobs WHERE job_id = ANY(ids);
    RETURN cardinality(ids);
END
$$;

CREATE FUNCTION public.pacer_prune_partition(p_partition text, p_now timestamp with time zone, p_retain_days jsonb, p_lock_timeout interval DEFAULT '00:00:02'::interval) RETURNS TABLE(partition text, action text, detail text)
    LANGUAGE plpgsql
    AS $$
DECLARE
    p record;
    why text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('pacer_partitions'));
    PERFORM set_config('lock_timeout', (extract(epoch FROM p_lock_timeout) * 1000)::bigint::text, true);
    -- Past retention as pacer_partitions_due lists it, read again under the lock.
    SELECT t.guard, x.starts, x.ends INTO p
    FROM partitioned_tables t CROSS JOIN LATERAL pacer_partitions(t.parent) x
    WHERE x.partition = p_partition AND p_retain_days ? t.parent
      AND x.ends + make_interval(secs => (p_retain_days->>t.parent)::int * 86400) <= p_now;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p.guard IS NOT NULL THEN
        EXECUTE format('SELECT string_agg(r, ''; '') FROM (' || p.guard || ') AS g(r)',
                       p_partition, p.starts, p.ends) INTO why;
    END IF;
    IF why IS NOT NULL THEN
        RETURN QUERY SELECT p_partition, 'kept'::text, why;
        RETURN;
    END IF;
    BEGIN
        EXECUTE format('DROP TABLE %I', p_partition);
        RETURN QUERY SELECT p_partition, 'dropped'::text, NULL::text;
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        RETURN QUERY SELECT p_partition, 'skipped'::text, SQLERRM;
    END;
END
$$;

CREATE FUNCTION public.pacer_prune_partitions(p_now timestamp with time zone, p_retain_days jsonb, p_lock_timeout interval DEFAULT '00:00:02'::interval) RETURNS TABLE(partition text, action text, detail text)
    LANGUAGE plpgsql
    AS $$
DECLARE
    d record;
BEGIN
    FOR d IN SELECT * FROM pacer_partitions_due(p_now, p_retain_days) LOOP
        IF d.action = 'due' THEN
            RETURN QUERY SELECT * FROM pacer_prune_partition(d.partition, p_now, p_retain_days, p_lock_timeout);
        ELSE
            RETURN QUERY SELECT d.partition, d.action, d.detail;
        END IF;
    END LOOP;
END
$$;

CREATE FUNCTION public.pacer_release_guids(p_guids text[], p_owner text) RETURNS integer
    LANGUAGE sql
    AS $$
    WITH mine AS (
        SELECT l.guid FROM guid_leases l
        WHERE l.guid = ANY(p_guids) AND l.owner = p_owner
        ORDER BY l.guid
        FOR UPDATE
    ), released AS (
        UPDATE guid_leases g SET owner = NULL, lease_until = NULL
        FROM mine
        WHERE g.guid = mine.guid
        RETURNING 1
    )
    SELECT count(*)::integer FROM released;
$$;

CREATE FUNCTION public.pacer_release_held(p_limit integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    r record;
    ids uuid[];
    done integer := 0;
    k_job uuid;
    k_shard bigint;
    k_guid text;
BEGIN
    FOR r IN SELECT * FROM hold_releases ORDER BY requested_at FOR UPDATE SKIP LOCKED LOOP
        k_job := NULL;
        k_shard := NULL;
        k_guid := NULL;
        IF r.scope = 'job' THEN
            k_job := r.key::uuid;
        ELSIF r.scope = 'shard' THEN
            k_shard := r.key::bigint;
        ELSE
            k_guid := r.key;
        END IF;
        SELECT array_agg(c.item_id) INTO ids FROM (
            SELECT i.item_id
            FROM items i
            JOIN jobs j ON j.job_id = i.job_id
            JOIN shards s ON s.shard_id = i.shard_id
            LEFT JOIN guid_leases g ON g.guid = i.guid
            LEFT JOIN guid_states h ON h.guid = i.guid
            WHERE i.held AND i.status = 'pending'
              AND (i.job_id = k_job OR i.shard_id = k_shard OR i.guid = k_guid)
              AND pacer_hold_reason(j.status, j.paused_reason, s.status, s.paused_reason,
                                    pacer_guid_hold(g.paused_reason, h.state::text, h.reason)) IS NULL
            LIMIT p_limit - done
            FOR UPDATE OF i SKIP LOCKED
        ) AS c;
        IF ids IS NULL THEN
            DELETE FROM hold_releases h
            WHERE h.scope = r.scope AND h.key = r.key AND h.requested_at < now() - interval '30 seconds';
            CONTINUE;
        END IF;
        UPDATE items SET held = false WHERE item_id = ANY(ids);
        PERFORM pacer_transition(ids, '{pending}', 'pending', 'ItemReleased');
        done := done + cardinality(ids);
        EXIT WHEN done >= p_limit;
    END LOOP;
    RETURN done;
END
$$;

CREATE FUNCTION public.pacer_request_release() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    k text;
BEGIN
    -- each table's own key column (a record's fields are resolved per trigger table)
    IF TG_TABLE_NAME = 'jobs' THEN
        k := NEW.job_id::text;
    ELSIF TG_TABLE_NAME = 'shards' THEN
        k := NEW.shard_id::text;
    ELSE
        k := NEW.guid;
    END IF;
    INSERT INTO hold_releases (scope, key) VALUES (TG_ARGV[0], k)
    ON CONFLICT (scope, key) DO UPDATE SET requested_at = now();
    RETURN NULL;
END
$$;

CREATE FUNCTION public.pacer_reserve_key(p_item uuid) RETURNS boolean
    LANGUAGE sql
    AS $$
    WITH i AS (SELECT it.idem_key, it.guid, it.to_id FROM items it WHERE it.item_id = p_item),
    added AS (
        INSERT INTO send_ledger (idem_key, item_id, guid, to_id, state)
        SELECT i.idem_key, p_item, i.guid, i.to_id, 'reserved' FROM i
        WHERE NOT EXISTS (SELECT 1 FROM send_ledger l WHERE l.idem_key = i.idem_key)
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM added)
        OR EXISTS (SELECT 1 FROM send_ledger l, i WHERE l.idem_key = i.idem_key AND l.item_id = p_item)
$$;

CREATE FUNCTION public.pacer_resolve_unverified(p_item uuid, p_delivered boolean, p_actor text, p_reason text) RETURNS TABLE(outcome text, message text, status text)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
#variable_conflict use_column
DECLARE
    i items%ROWTYPE;
    job_status text;
    newer integer;  -- the newest status version of its business id, when newer than its job's
    why constant text := 'resolved as not delivered after a restore from a backup: it may have been resolved and '
                         'sent after the backup, so it is verified before it is sent';
BEGIN
    SELECT * INTO i FROM items WHERE item_id = p_item FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, format('no item %s', p_item), NULL::text;
        RETURN;
    END IF;
    IF i.status <> 'unverified' THEN
        RETURN QUERY SELECT 'conflict'::text,
            format('item is %s, not unverified; only an in-doubt send is resolved by hand', i.status), i.status::text;
        RETURN;
    END IF;
    IF p_delivered THEN
        PERFORM pacer_transition(ARRAY[p_item], '{unverified}', 'confirmed', 'ItemResolvedDelivered',
            jsonb_build_object('actor', p_actor, 'reason', p_reason), p_clear_lease => true);
        UPDATE send_ledger SET state = 'sent', sent_at = COALESCE(sent_at, now())
        WHERE idem_key = i.idem_key AND item_id = p_item;
        RETURN QUERY SELECT 'done'::text, format('item %s resolved as delivered: confirmed; its key stays used', p_item),
            'confirmed'::text;
    ELSIF pacer_restored_after(p_item) THEN  -- read before this decision writes an event of the item's
        PERFORM pacer_transition(ARRAY[p_item], '{unverified}', 'recovery_pending', 'ItemInDoubt',
            jsonb_build_object('restored', true, 'actor', p_actor, 'reason', p_reason,
                               'source', 'resolved', 'error_class', 'in_doubt', 'error', why),
            p_via => 'pending', p_via_type => 'ItemResolvedNotDelivered',
            p_via_payload => jsonb_build_object('actor', p_actor, 'reason', p_reason),
            p_clear_lease => true, p_error_class => 'in_doubt', p_error => why);
        -- Its key stays reserved (an unverified item holds it; taken again if it does not).
        PERFORM pacer_reserve_key(p_item);
        RETURN QUERY SELECT 'done'::text,
            format('item %s resolved as not delivered, but the database was restored from a backup after it last '
                   'changed, and it may have been resolved and sent since: in doubt (recovery_pending) until the '
                   'reconciler asks the gateway whether key %s was delivered (found: confirmed, not sent again; '
                   'not found: pending, sent under the same key; no answer: unverified again, to resolve as usual)',
                   p_item, i.idem_key),
            'recovery_pending'::text;
    ELSE
        DELETE FROM send_ledger WHERE idem_key = i.idem_key AND item_id = p_item AND state = 'reserved';
        PERFORM pacer_transition(ARRAY[p_item], '{unverified}', 'pending', 'ItemResolvedNotDelivered',
            jsonb_build_object('actor', p_actor, 'reason', p_reason), p_clear_lease => true);
        -- What becomes of it, said as it is: pending is not always sent (pacer_begin_send
        -- abandons an item of a cancelled job and expires one past its expire_at).
        SELECT j.status, (SELECT max(n.coalesce_version) FROM jobs n
                          WHERE n.coalesce_key = j.coalesce_key AND n.tenant = j.tenant
                            AND n.coalesce_version > j.coalesce_version)
        INTO job_status, newer FROM jobs j WHERE j.job_id = i.job_id;
        RETURN QUERY SELECT 'done'::text,
            format('item %s resolved as not delivered: pending again, ', p_item) || CASE
                WHEN job_status = 'cancelled' THEN
                    'but its job is cancelled: it is abandoned when a sender comes to claim it, never sent'
                WHEN newer IS NOT NULL THEN
                    format('but version %s of its business id superseded it: it is abandoned when a sender comes '
                           'to claim it, never sent', newer)
                WHEN i.expire_at <= now() THEN
                    format('but its expire_at (%s UTC) has passed: it expires unsent (at its claim, or by the '
                           'reconciler''s expiry sweep)',
                           to_char(i.expire_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'))
                WHEN job_status IN ('paused', 'terminated', 'awaiting_approval') THEN
                    format('it will be sent under the same key once its job (now %s) runs again', job_status)
                ELSE 'it will be sent under the same key'
            END,
            'pending'::text;
    END IF;
END
$$;

CREATE FUNCTION public.pacer_restore_epoch() RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    current_epoch bigint;
    epoch bigint;
BEGIN
    SELECT pg_get_expr(d.adbin, d.adrelid)::bigint INTO current_epoch
    FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
    WHERE d.adrelid = 'item_events'::regclass AND a.attname = 'restore_epoch';
    epoch := greatest(floor(extract(epoch FROM clock_timestamp()))::bigint, coalesce(current_epoch, 0) + 1);
    EXECUTE format('ALTER TABLE item_events ALTER COLUMN restore_epoch SET DEFAULT %s', epoch);
    RETURN epoch;
END
$$;

CREATE FUNCTION public.pacer_restored_after(p_item uuid) RETURNS boolean
    LANGUAGE plpgsql STABLE
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    epoch bigint;
BEGIN
    SELECT pg_get_expr(d.adbin, d.adrelid)::bigint INTO epoch
    FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
    WHERE d.adrelid = 'item_events'::regclass AND a.attname = 'restore_epoch';
    RETURN COALESCE(epoch, 0) > 0
       AND NOT EXISTS (SELECT 1 FROM item_events e WHERE e.item_id = p_item AND e.restore_epoch >= epoch);
END
$$;

CREATE FUNCTION public.pacer_resume_guid(p_guid text, p_actor text, p_reason text DEFAULT NULL::text) RETURNS TABLE(outcome text, message text)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    was text;
    known boolean;
    st guid_state;
BEGIN
    SELECT l.paused_reason INTO was FROM guid_leases l WHERE l.guid = p_guid FOR UPDATE;
    known := FOUND;
    SELECT h.state INTO st FROM guid_states h WHERE h.guid = p_guid FOR UPDATE;
    known := known OR FOUND;
    IF NOT known THEN
        RETURN QUERY SELECT 'not_found'::text, format('no guid %s', p_guid);
        RETURN;
    END IF;
    IF was IS NULL AND COALESCE(st, 'online') = 'online' THEN
        RETURN QUERY SELECT 'noop'::text, 'guid is not paused'::text;
        RETURN;
    END IF;
    IF was IS NOT NULL THEN
        UPDATE guid_leases SET paused_reason = NULL, paused_by = NULL, paused_at = NULL WHERE guid = p_guid;
    END IF;
    IF st IS NOT NULL AND st <> 'online' THEN
        PERFORM pacer_set_guid_state(p_guid, 'online', 'operator', COALESCE(p_reason, 'resumed by ' || p_actor),
                                     clock_timestamp());
    END IF;
    PERFORM pacer_audit(p_actor, 'resume', 'guid', p_guid, p_reason,
                        jsonb_build_object('paused', was IS NOT NULL, 'paused_reason', was, 'state', st),
                        jsonb_build_object('paused', false, 'state', CASE WHEN st IS NULL THEN NULL ELSE 'online' END));
    RETURN QUERY SELECT 'done'::text,
        format('guid %s resumed (was %s)', p_guid, concat_ws(', ', 'paused: ' || was, NULLIF(st::text, 'online')));
END
$$;

CREATE FUNCTION public.pacer_retry_item(p_item uuid, p_actor text, p_priority smallint DEFAULT NULL::smallint) RETURNS TABLE(outcome text, new_item uuid, message text)
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN QUERY SELECT r.outcome, r.new_item, r.message FROM pacer_retry_items(ARRAY[p_item], p_actor, p_priority) AS r;
END
$$;

CREATE FUNCTION public.pacer_retry_items(p_items uuid[], p_actor text, p_priority smallint DEFAULT NULL::smallint) RETURNS TABLE(ord bigint, item_id uuid, outcome text, new_item uuid, message text)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    r record;
    c record;
    shard_ids bigint[] := '{}';
    job_ids uuid[] := '{}';
BEGIN
    PERFORM pacer_partition_writer();  -- a compensation may land in a partition a prune would drop
    -- Every coalescing lock of the batch first, in one order (pacer_compensate takes each again
    -- before its item's row): taken item by item, in shard order, two bulk retries over two
    -- ticket chains could each hold one and wait for the other's.
    PERFORM pg_advisory_xact_lock(x.h)
    FROM (SELECT DISTINCT hashtext('pacer.coalesce:' || k.tenant || ':' || k.coalesce_key) AS h
          FROM items i JOIN jobs k ON k.job_id = i.job_id
          WHERE i.item_id = ANY(p_items) AND k.coalesce_key IS NOT NULL) x
    ORDER BY x.h;
    FOR r IN SELECT u.id, u.n, i.shard_id, i.job_id
             FROM unnest(p_items) WITH ORDINALITY AS u(id, n) LEFT JOIN items i ON i.item_id = u.id
             ORDER BY i.shard_id NULLS LAST, u.id, u.n LOOP
        SELECT * INTO c FROM pacer_compensate(r.id, p_actor, p_priority);
        IF c.outcome = 'created' THEN
            shard_ids := shard_ids || r.shard_id;
            job_ids := job_ids || r.job_id;
        END IF;
        ord := r.n;
        item_id := r.id;
        outcome := c.outcome;
        new_item := c.new_item;
        message := c.message;
        RETURN NEXT;
    END LOOP;
    IF cardinality(shard_ids) = 0 THEN
        RETURN;
    END IF;
    PERFORM 1 FROM shards s WHERE s.shard_id = ANY(shard_ids) ORDER BY s.shard_id FOR NO KEY UPDATE;
    UPDATE shards s
    SET total = s.total + a.n, status = CASE WHEN s.status = 'completed' THEN 'running' ELSE s.status END
    FROM (SELECT x AS shard_id, count(*) AS n FROM unnest(shard_ids) AS x GROUP BY x) AS a
    WHERE s.shard_id = a.shard_id;
    PERFORM 1 FROM jobs j WHERE j.job_id = ANY(job_ids) ORDER BY j.job_id FOR NO KEY UPDATE;
    UPDATE jobs j
    SET total = j.total + a.n,
        status = CASE WHEN j.status = 'completed' THEN 'running' ELSE j.status END,
        finished_at = CASE WHEN j.status = 'completed' THEN NULL ELSE j.finished_at END
    FROM (SELECT x AS job_id, count(*) AS n FROM unnest(job_ids) AS x GROUP BY x) AS a
    WHERE j.job_id = a.job_id;
END
$$;

CREATE FUNCTION public.pacer_set_guid_state(p_guid text, p_state public.guid_state, p_source text, p_reason text, p_ts timestamp with time zone) RETURNS TABLE(changed boolean, previous public.guid_state, state public.guid_state)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    cur record;
BEGIN
    SELECT g.state, g.event_ts INTO cur FROM guid_states g WHERE g.guid = p_guid FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO guid_states (guid, state, since, source, reason, event_ts, changes)
        VALUES (p_guid, p_state, now(), p_source, p_reason, p_ts, 1)
        ON CONFLICT (guid) DO NOTHING;
        IF FOUND THEN
            INSERT INTO guid_state_history (guid, state, previous, event_ts, source, reason)
            VALUES (p_guid, p_state, NULL, p_ts, p_source, p_reason);
            RETURN QUERY SELECT true, NULL::guid_state, p_state;
            RETURN;
        END IF;
        -- inserted meanwhile by a concurrent event: apply on top of it
        SELECT g.state, g.event_ts INTO cur FROM guid_states g WHERE g.guid = p_guid FOR UPDATE;
    END IF;
    IF p_ts <= cur.event_ts THEN
        RETURN QUERY SELECT false, cur.state, cur.state;
        RETURN;
    END IF;
    IF cur.state = p_state THEN
        UPDATE guid_states SET event_ts = p_ts, events = events + 1 WHERE guid = p_guid;
        RETURN QUERY SELECT false, cur.state, cur.state;
        RETURN;
    END IF;
    UPDATE guid_states SET state = p_state, since = now(), source = p_source, reason = p_reason, event_ts = p_ts,
                           events = events + 1, changes = changes + 1
    WHERE guid = p_guid;
    INSERT INTO guid_state_history (guid, state, previous, event_ts, source, reason)
    VALUES (p_guid, p_state, cur.state, p_ts, p_source, p_reason);
    RETURN QUERY SELECT true, cur.state, p_state;
END
$$;

CREATE FUNCTION public.pacer_settle(p_item uuid, p_epoch bigint, p_idem_key text, p_to public.item_status, p_type text, p_error_class text, p_error text, p_next_attempt_at timestamp with time zone, p_release_ledger boolean, p_hold_guid text DEFAULT NULL::text, p_refund boolean DEFAULT false) RETURNS boolean
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    g text;
    j uuid;
    sent_at timestamptz;
    budgeted boolean := false;
BEGIN
    -- This call's commit is synchronous whatever the default (pacer_common.db.durable).
    PERFORM set_config('synchronous_commit', 'on', true);
    SELECT i.guid, i.job_id, i.updated_at INTO g, j, sent_at FROM items i WHERE i.item_id = p_item;  -- submitted at
    IF p_refund THEN
        -- Whether the send being settled counted a budget unit: its ItemSubmitted (the item's
        -- latest event while it is ours) says so. If it is no longer ours, the guarded
        -- transition below moves nothing and nothing is given back.
        SELECT COALESCE((e.payload ->> 'budgeted')::boolean, false) INTO budgeted
        FROM items i JOIN item_events e ON e.item_id = i.item_id AND e.version = i.version
        WHERE i.item_id = p_item;
        IF budgeted THEN
            -- The job's row before the item's, the order pacer_begin_send takes them in.
            PERFORM 1 FROM jobs WHERE job_id = j FOR UPDATE;
        END IF;
    END IF;
    PERFORM pacer_transition(ARRAY[p_item], '{submitted}', p_to, p_type,
        jsonb_build_object('error_class', p_error_class, 'error', p_error)
            || CASE WHEN p_refund THEN '{"refund": true}'::jsonb ELSE '{}'::jsonb END, p_epoch => p_epoch,
        p_clear_lease => true, p_next_attempt_at => p_next_attempt_at,
        p_attempt_bump => CASE WHEN p_refund THEN -1 ELSE 0 END,
        p_error_class => p_error_class, p_error => p_error);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE guid_leases SET last_answer_at = clock_timestamp() WHERE guid = g;  -- a successor paces from here
    IF p_release_ledger THEN
        DELETE FROM send_ledger WHERE idem_key = p_idem_key AND item_id = p_item AND state = 'reserved';
    END IF;
    IF budgeted THEN
        UPDATE jobs SET budget_used = budget_used - 1 WHERE job_id = j AND budget_used > 0;
    END IF;
    IF p_hold_guid IS NOT NULL THEN
        PERFORM pacer_set_guid_state(g, p_hold_guid::guid_state, 'send_failure', p_error, sent_at);
    END IF;
    RETURN true;
END
$$;

CREATE FUNCTION public.pacer_shard_action(p_shard bigint, p_action text, p_actor text, p_reason text DEFAULT NULL::text) RETURNS TABLE(outcome text, message text, status text)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    s shards%ROWTYPE;
    after_status text;
    job_completed boolean;  -- the shard's job completed with it
BEGIN
    SELECT * INTO s FROM shards WHERE shard_id = p_shard FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, format('no shard %s', p_shard), NULL::text;
        RETURN;
    END IF;
    IF p_action = 'pause' THEN
        IF s.status = 'paused' THEN
            RETURN QUERY SELECT 'noop'::text, 'shard is already paused'::text, s.status;
            RETURN;
        ELSIF s.status NOT IN ('pending', 'running') THEN
            RETURN QUERY SELECT 'conflict'::text, format('shard is %s; only an open shard can be paused', s.status), s.status;
            RETURN;
        END IF;
        after_status := 'paused';
        UPDATE shards SET status = 'paused', paused_reason = COALESCE(p_reason, 'operator'), paused_by = p_actor
        WHERE shard_id = p_shard;
    ELSIF p_action = 'resume' THEN
        IF s.status <> 'paused' THEN
            RETURN QUERY SELECT 'noop'::text, format('shard is %s, not paused', s.status), s.status;
            RETURN;
        END IF;
        after_status := CASE WHEN pacer_job_open(s.job_id, p_shard) THEN 'running' ELSE 'completed' END;
        UPDATE shards SET status = after_status, paused_reason = NULL, paused_by = NULL WHERE shard_id = p_shard;
        IF after_status = 'completed' THEN
            -- The job's row first, in a statement of its own, as the reconciler's refresh_jobs
            -- takes it: the check below then sees a shard it completed meanwhile (its snapshot
            -- is taken after the lock), and it sees this one.
            PERFORM 1 FROM jobs WHERE job_id = s.job_id FOR NO KEY UPDATE;
            UPDATE jobs j SET status = 'completed', finished_at = now(), started_at = COALESCE(j.started_at, now())
            WHERE j.job_id = s.job_id AND j.status = 'running'
              AND NOT EXISTS (SELECT 1 FROM shards o WHERE o.job_id = s.job_id AND o.status <> 'completed')
            RETURNING j.status = 'completed' INTO job_completed;  -- NULL: not its last open shard
        END IF;
    ELSE
        RAISE EXCEPTION 'unknown shard action %', p_action USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pacer_audit(p_actor, p_action, 'shard', p_shard::text, p_reason,
        jsonb_build_object('status', s.status, 'paused_reason', s.paused_reason),
        jsonb_build_object('status', after_status, 'paused_reason', CASE WHEN after_status = 'paused'
                                                                     THEN COALESCE(p_reason, 'operator') END));
    RETURN QUERY SELECT 'done'::text, format('shard %s: %s → %s', p_action, s.status, after_status)
        || CASE WHEN after_status <> 'completed' THEN ''
                ELSE '; nothing of it was left open (its items ended while it was paused: expired, sent or cancelled)'
                     || CASE WHEN job_completed THEN format('; job %s completed too: this was its last open shard',
                                                            s.job_id) ELSE '' END
           END,
        after_status;
END
$$;

CREATE FUNCTION public.pacer_stamp_limits_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.change_xid := pg_current_xact_id();
    RETURN NEW;
END
$$;

CREATE FUNCTION public.pacer_tenant_day(p_zone text, OUT day date, OUT ends_at timestamp with time zone) RETURNS record
    LANGUAGE sql STABLE
    AS $$
    SELECT d, pacer_local_time((d + 1)::timestamp, z)
    FROM (SELECT COALESCE(p_zone, NULLIF(current_setting('pacer.timezone', true), ''),
                          (SELECT s.limits ->> 'timezone' FROM sender_limits s ORDER BY s.seen_at DESC LIMIT 1),
                          'Asia/Shanghai') AS z) AS zone
    CROSS JOIN LATERAL (SELECT (now() AT TIME ZONE zone.z)::date AS d) AS today
$$;

CREATE FUNCTION public.pacer_test_send(p_job uuid, p_item uuid, p_guid text, p_to_id text, p_content text, p_actor text) RETURNS TABLE(job_id uuid, item_id uuid, idem_key text)
    LANGUAGE plpgsql
    AS $$
DECLARE
    s bigint;
    k text := 'test:' || p_item::text;
    owner text := COALESCE((SELECT g.tenant FROM tenant_guids g WHERE g.guid = p_guid), 'default');
BEGIN
    INSERT INTO jobs (job_id, request_id, kind, priority, created_by, message, content_version, target_mode,
                      total, request, dispatched_at, target_fetched, target_complete_at, tenant)
    VALUES (p_job, 'test-send-' || p_job::text, 'campaign', 0, p_actor,
            jsonb_build_object('type', 'text', 'content', p_content), 1, 'snapshot', 1,
            jsonb_build_object('test_send', true, 'guid', p_guid, 'to_id', p_to_id), now(), 1, now(), owner);
    INSERT INTO shards (job_id, guid, total) VALUES (p_job, p_guid, 1) RETURNING shard_id INTO s;
    INSERT INTO shard_status_counts (shard_id, status, n) VALUES (s, 'pending', 1);
    INSERT INTO items (item_id, job_id, shard_id, guid, to_id, content, idem_key, priority, kind, status, version)
    VALUES (p_item, p_job, s, p_guid, p_to_id, p_content, k, 0, 'campaign', 'pending', 0);
    INSERT INTO item_events (item_id, job_id, shard_id, guid, version, type, from_status, to_status, payload)
    VALUES (p_item, p_job, s, p_guid, 0, 'ItemTestSendCreated', 'pending', 'pending',
            jsonb_build_object('actor', p_actor, 'to_id', p_to_id));
    RETURN QUERY SELECT p_job, p_item, k;
END
$$;

CREATE FUNCTION public.pacer_transition(p_ids uuid[], p_from public.item_status[], p_to public.item_status, p_type text, p_payload jsonb DEFAULT '{}'::jsonb, p_epoch bigint DEFAULT NULL::bigint, p_only_expired boolean DEFAULT false, p_lease_owner text DEFAULT NULL::text, p_lease_ttl interval DEFAULT NULL::interval, p_clear_lease boolean DEFAULT false, p_attempt_bump integer DEFAULT 0, p_next_attempt_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_error_class text DEFAULT NULL::text, p_error text DEFAULT NULL::text, p_epochs bigint[] DEFAULT NULL::bigint[], p_payloads jsonb[] DEFAULT NULL::jsonb[], p_via public.item_status DEFAULT NULL::public.item_status, p_via_type text DEFAULT NULL::text, p_via_payload jsonb DEFAULT '{}'::jsonb) RETURNS TABLE(item_id uuid, version integer, lease_epoch bigint, attempts integer, from_status public.item_status)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
#variable_conflict use_column
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(p_from) AS f(s)
               WHERE NOT EXISTS (SELECT 1 FROM item_transitions t
                                 WHERE t.from_status = f.s AND t.to_status = COALESCE(p_via, p_to)))
       OR (p_via IS NOT NULL AND NOT EXISTS (SELECT 1 FROM item_transitions t
                                             WHERE t.from_status = p_via AND t.to_status = p_to)) THEN
        RAISE EXCEPTION 'illegal item transition % -> %', p_from, COALESCE(p_via::text || ' -> ', '') || p_to::text
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN QUERY
    WITH target AS (
    -- An item's own epoch and payload are found by its position in p_ids, not by a join: a
    -- join with the list, planned before the statistics knew items, rescanned the items
    -- for every entry of the list.
    SELECT i.item_id, i.status AS from_status, p_payloads[array_position(p_ids, i.item_id)] AS payload
    FROM items i
    WHERE i.item_id = ANY(p_ids)
      AND i.status = ANY(p_from)
      AND (p_epoch IS NULL OR i.lease_epoch = p_epoch)
      AND (p_epochs IS NULL OR i.lease_epoch = p_epochs[array_position(p_ids, i.item_id)])
      AND (NOT p_only_expired OR i.lease_until < now())
    ORDER BY i.item_id
    FOR UPDATE OF i
), moved AS (
    UPDATE items AS i SET
        status          = p_to,
        held            = i.held AND i.status = 'pending' AND p_to = 'pending',
        version         = i.version + CASE WHEN p_via IS NULL THEN 1 ELSE 2 END,
        updated_at      = now(),
        lease_epoch     = i.lease_epoch + CASE WHEN p_lease_owner IS NULL THEN 0 ELSE 1 END,
        lease_owner     = CASE WHEN p_lease_owner IS NOT NULL THEN p_lease_owner
                               WHEN p_clear_lease THEN NULL ELSE i.lease_owner END,
        lease_until     = CASE WHEN p_lease_owner IS NOT NULL THEN now() + p_lease_ttl
                               WHEN p_clear_lease THEN NULL ELSE i.lease_until END,
        attempts        = i.attempts + p_attempt_bump,
        next_attempt_at = p_next_attempt_at,
        last_error_class = COALESCE(p_error_class, i.last_error_class),
        last_error      = COALESCE(p_error, i.last_error)
    FROM target
    WHERE i.item_id = target.item_id
    RETURNING i.item_id, i.job_id, i.shard_id, i.guid, i.version, i.lease_epoch,
              i.attempts, target.from_status, target.payload
)
, logged AS (
    INSERT INTO item_events (item_id, job_id, shard_id, guid, version, type, from_status, to_status, payload)
    SELECT item_id, job_id, shard_id, guid, version - 1, p_via_type, from_status, p_via, p_via_payload
    FROM moved WHERE p_via IS NOT NULL
    UNION ALL
    SELECT item_id, job_id, shard_id, guid, version, p_type, COALESCE(p_via, from_status), p_to,
           COALESCE(payload, p_payload)
           || CASE WHEN p_via IS NOT NULL AND p_attempt_bump > 0 THEN jsonb_build_object('attempt', attempts)
                   ELSE '{}' END
    FROM moved
)
SELECT m.item_id, m.version, m.lease_epoch, m.attempts, m.from_status FROM moved m;
END
$$;

CREATE FUNCTION public.pacer_uuid7_floor(p_at timestamp with time zone) RETURNS uuid
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT (lpad(to_hex(floor(extract(epoch FROM p_at) * 1000)::bigint), 12, '0') || repeat('0', 20))::uuid
$$;

CREATE TABLE public.api_tokens (
    token_hash text NOT NULL,
    name text NOT NULL,
    role text NOT NULL,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    revoked_at timestamp with time zone,
    last_used_at timestamp with time zone,
    tenants text[],
    CONSTRAINT api_tokens_role_check CHECK ((role = ANY (ARRAY['operator'::text, 'tech_admin'::text, 'admin'::text])))
);

CREATE TABLE public.approved_contents (
    content_hash text NOT NULL,
    approved_by text NOT NULL,
    approved_at timestamp with time zone DEFAULT now() NOT NULL,
    job_id uuid NOT NULL
);

CREATE TABLE public.audit_log (
    id bigint NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    actor text NOT NULL,
    action text NOT NULL,
    target_type text NOT NULL,
    target_id text NOT NULL,
    reason text,
    before jsonb,
    after jsonb,
    xid xid8 DEFAULT pg_current_xact_id() NOT NULL
)
PARTITION BY RANGE (at);

CREATE TABLE public.audit_log_default (
    id bigint DEFAULT NULL CONSTRAINT audit_log_id_not_null NOT NULL,
    at timestamp with time zone DEFAULT now() CONSTRAINT audit_log_at_not_null NOT NULL,
    actor text CONSTRAINT audit_log_actor_not_null NOT NULL,
    action text CONSTRAINT audit_log_action_not_null NOT NULL,
    target_type text CONSTRAINT audit_log_target_type_not_null NOT NULL,
    target_id text CONSTRAINT audit_log_target_id_not_null NOT NULL,
    reason text,
    before jsonb,
    after jsonb,
    xid xid8 DEFAULT pg_current_xact_id() CONSTRAINT audit_log_xid_not_null NOT NULL
);

CREATE SEQUENCE public.audit_log_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.audit_log_id_seq OWNED BY public.audit_log.id;

CREATE TABLE public.consumer_positions (
    group_id text NOT NULL,
    topic text NOT NULL,
    kafka_partition integer NOT NULL,
    next_offset bigint NOT NULL,
    recorded_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.customers (
    customer_id text NOT NULL,
    name text DEFAULT ''::text NOT NULL,
    remark text DEFAULT ''::text NOT NULL,
    tags jsonb DEFAULT '[]'::jsonb NOT NULL,
    version bigint NOT NULL,
    synced_at timestamp with time zone DEFAULT now() NOT NULL,
    synced_by uuid,
    writes bigint DEFAULT 1 NOT NULL
);

CREATE TABLE public.guid_leases (
    guid text NOT NULL,
    owner text,
    epoch bigint DEFAULT 0 NOT NULL,
    since timestamp with time zone,
    lease_until timestamp with time zone,
    renew_count bigint DEFAULT 0 NOT NULL,
    takeovers bigint DEFAULT 0 NOT NULL,
    last_send_at timestamp with time zone,
    paused_reason text,
    paused_by text,
    paused_at timestamp with time zone,
    windows jsonb DEFAULT '{}'::jsonb NOT NULL,
    forced_releases bigint DEFAULT 0 NOT NULL,
    released_by text,
    released_at timestamp with time zone,
    evicted_owner text,
    evicted_until timestamp with time zone,
    last_answer_at timestamp with time zone,
    penalty double precision,
    gateway_quiet_until timestamp with time zone,
    CONSTRAINT guid_leases_penalty_above_one CHECK ((penalty > (1)::double precision))
);

CREATE TABLE public.guid_limits (
    guid text NOT NULL,
    limits jsonb NOT NULL,
    updated_by text NOT NULL,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    change_xid xid8 DEFAULT pg_current_xact_id() NOT NULL
);

CREATE TABLE public.guid_state_history (
    id bigint NOT NULL,
    guid text NOT NULL,
    state public.guid_state NOT NULL,
    previous public.guid_state,
    at timestamp with time zone DEFAULT now() NOT NULL,
    event_ts timestamp with time zone NOT NULL,
    source text NOT NULL,
    reason text
)
PARTITION BY RANGE (at);

CREATE SEQUENCE public.guid_state_history_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.guid_state_history_id_seq OWNED BY public.guid_state_history.id;

CREATE TABLE public.guid_state_history_default (
    id bigint DEFAULT nextval('public.guid_state_history_id_seq'::regclass) CONSTRAINT guid_state_history_id_not_null NOT NULL,
    guid text CONSTRAINT guid_state_history_guid_not_null NOT NULL,
    state public.guid_state CONSTRAINT guid_state_history_state_not_null NOT NULL,
    previous public.guid_state,
    at timestamp with time zone DEFAULT now() CONSTRAINT guid_state_history_at_not_null NOT NULL,
    event_ts timestamp with time zone CONSTRAINT guid_state_history_event_ts_not_null NOT NULL,
    source text CONSTRAINT guid_state_history_source_not_null NOT NULL,
    reason text
);

CREATE TABLE public.guid_states (
    guid text NOT NULL,
    state public.guid_state NOT NULL,
    since timestamp with time zone DEFAULT now() NOT NULL,
    source text NOT NULL,
    reason text,
    event_ts timestamp with time zone NOT NULL,
    events bigint DEFAULT 1 NOT NULL,
    changes bigint DEFAULT 0 NOT NULL,
    CONSTRAINT guid_states_source_check CHECK ((source = ANY (ARRAY['callback'::text, 'send_failure'::text, 'operator'::text])))
);

CREATE TABLE public.hold_releases (
    scope text NOT NULL,
    key text NOT NULL,
    requested_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT hold_releases_scope_check CHECK ((scope = ANY (ARRAY['job'::text, 'shard'::text, 'guid'::text])))
);

CREATE TABLE public.item_events (
    seq bigint NOT NULL,
    xid xid8 DEFAULT pg_current_xact_id() NOT NULL,
    item_id uuid NOT NULL,
    job_id uuid NOT NULL,
    shard_id bigint NOT NULL,
    guid text NOT NULL,
    version integer NOT NULL,
    type text NOT NULL,
    from_status public.item_status NOT NULL,
    to_status public.item_status NOT NULL,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    occurred_at timestamp with time zone DEFAULT now() NOT NULL,
    restore_epoch bigint DEFAULT 0 NOT NULL
)
PARTITION BY RANGE (item_id);

CREATE TABLE public.item_events_default (
    seq bigint DEFAULT NULL CONSTRAINT item_events_seq_not_null NOT NULL,
    xid xid8 DEFAULT pg_current_xact_id() CONSTRAINT item_events_xid_not_null NOT NULL,
    item_id uuid CONSTRAINT item_events_item_id_not_null NOT NULL,
    job_id uuid CONSTRAINT item_events_job_id_not_null NOT NULL,
    shard_id bigint CONSTRAINT item_events_shard_id_not_null NOT NULL,
    guid text CONSTRAINT item_events_guid_not_null NOT NULL,
    version integer CONSTRAINT item_events_version_not_null NOT NULL,
    type text CONSTRAINT item_events_type_not_null NOT NULL,
    from_status public.item_status CONSTRAINT item_events_from_status_not_null NOT NULL,
    to_status public.item_status CONSTRAINT item_events_to_status_not_null NOT NULL,
    payload jsonb DEFAULT '{}'::jsonb CONSTRAINT item_events_payload_not_null NOT NULL,
    occurred_at timestamp with time zone DEFAULT now() CONSTRAINT item_events_occurred_at_not_null NOT NULL,
    restore_epoch bigint DEFAULT 0 CONSTRAINT item_events_restore_epoch_not_null NOT NULL
);

CREATE SEQUENCE public.item_events_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.item_events_seq_seq OWNED BY public.item_events.seq;

CREATE TABLE public.item_transitions (
    from_status public.item_status NOT NULL,
    to_status public.item_status NOT NULL
);

CREATE TABLE public.items_default (
    item_id uuid CONSTRAINT items_item_id_not_null NOT NULL,
    job_id uuid CONSTRAINT items_job_id_not_null NOT NULL,
    shard_id bigint CONSTRAINT items_shard_id_not_null NOT NULL,
    guid text CONSTRAINT items_guid_not_null NOT NULL,
    to_id text CONSTRAINT items_to_id_not_null NOT NULL,
    content text,
    idem_key text CONSTRAINT items_idem_key_not_null NOT NULL,
    priority smallint CONSTRAINT items_priority_not_null NOT NULL,
    kind text CONSTRAINT items_kind_not_null NOT NULL,
    status public.item_status DEFAULT 'pending'::public.item_status CONSTRAINT items_status_not_null NOT NULL,
    version integer DEFAULT 0 CONSTRAINT items_version_not_null NOT NULL,
    attempts integer DEFAULT 0 CONSTRAINT items_attempts_not_null NOT NULL,
    lease_owner text,
    lease_epoch bigint DEFAULT 0 CONSTRAINT items_lease_epoch_not_null NOT NULL,
    lease_until timestamp with time zone,
    expire_at timestamp with time zone,
    not_before timestamp with time zone,
    next_attempt_at timestamp with time zone,
    last_error_class text,
    last_error text,
    created_at timestamp with time zone DEFAULT now() CONSTRAINT items_created_at_not_null NOT NULL,
    updated_at timestamp with time zone DEFAULT now() CONSTRAINT items_updated_at_not_null NOT NULL,
    compensates uuid,
    held boolean DEFAULT false CONSTRAINT items_held_not_null NOT NULL,
    target_page integer,
    traceparent text
);

CREATE TABLE public.job_target_pages (
    job_id uuid NOT NULL,
    page_no integer NOT NULL,
    cursor_in text,
    cursor_out text,
    fetched integer NOT NULL,
    added integer NOT NULL,
    duplicates integer NOT NULL,
    invalid integer NOT NULL,
    first_error text,
    fetched_at timestamp with time zone NOT NULL,
    stored_at timestamp with time zone DEFAULT now() NOT NULL,
    dispatched_at timestamp with time zone,
    CONSTRAINT job_target_pages_page_no_check CHECK ((page_no > 0))
);

CREATE TABLE public.jobs (
    job_id uuid NOT NULL,
    request_id text NOT NULL,
    kind text NOT NULL,
    priority smallint NOT NULL,
    created_by text NOT NULL,
    message jsonb NOT NULL,
    content_version integer NOT NULL,
    target_mode text NOT NULL,
    total integer NOT NULL,
    status text DEFAULT 'running'::text NOT NULL,
    expire_at timestamp with time zone,
    not_before timestamp with time zone,
    budget_max_sends integer,
    request jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    dispatched_at timestamp with time zone,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    paused_reason text,
    paused_by text,
    paused_at timestamp with time zone,
    budget_used bigint DEFAULT 0 NOT NULL,
    coalesce_key text,
    coalesce_version integer,
    target_cursor text,
    target_pages integer DEFAULT 0 NOT NULL,
    target_fetched bigint DEFAULT 0 NOT NULL,
    target_duplicates bigint DEFAULT 0 NOT NULL,
    target_invalid bigint DEFAULT 0 NOT NULL,
    target_complete_at timestamp with time zone,
    target_wait_reason text,
    target_owner text,
    target_lease_until timestamp with time zone,
    tenant text DEFAULT 'default'::text NOT NULL,
    traceparent text,
    item_content text,
    approved_at timestamp with time zone,
    approved_by text,
    CONSTRAINT jobs_status_check CHECK ((status = ANY (ARRAY['running'::text, 'paused'::text, 'completed'::text, 'cancelled'::text, 'terminated'::text, 'awaiting_approval'::text]))),
    CONSTRAINT jobs_target_mode_check CHECK ((target_mode = ANY (ARRAY['snapshot'::text, 'requery'::text])))
);

CREATE TABLE public.leader_leases (
    name text NOT NULL,
    holder text NOT NULL,
    epoch bigint NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    taken_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT leader_leases_epoch_check CHECK ((epoch > 0))
);

CREATE TABLE public.log_cursors (
    name text NOT NULL,
    last_xid xid8 DEFAULT '0'::xid8 NOT NULL,
    last_seq bigint DEFAULT 0 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.media (
    guid text NOT NULL,
    url_hash text NOT NULL,
    url text NOT NULL,
    kind text NOT NULL,
    file_name text,
    media_id text NOT NULL,
    status text NOT NULL,
    reason text,
    uploaded_at timestamp with time zone DEFAULT now() NOT NULL,
    checked_at timestamp with time zone,
    settled_at timestamp with time zone,
    settled_by text,
    generation integer DEFAULT 0 NOT NULL,
    CONSTRAINT media_generation_check CHECK ((generation >= 0)),
    CONSTRAINT media_kind_check CHECK ((kind = ANY (ARRAY['image'::text, 'file'::text, 'video'::text]))),
    CONSTRAINT media_settled_by_check CHECK ((settled_by = ANY (ARRAY['upload'::text, 'callback'::text, 'poll'::text, 'send'::text]))),
    CONSTRAINT media_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'ready'::text, 'failed'::text, 'stale'::text])))
);

CREATE TABLE public.operator_conflicts (
    id bigint NOT NULL,
    item_id uuid NOT NULL,
    actor text NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    reason text NOT NULL
)
PARTITION BY RANGE (at);

CREATE TABLE public.operator_conflicts_default (
    id bigint DEFAULT NULL CONSTRAINT operator_conflicts_id_not_null NOT NULL,
    item_id uuid CONSTRAINT operator_conflicts_item_id_not_null NOT NULL,
    actor text CONSTRAINT operator_conflicts_actor_not_null NOT NULL,
    at timestamp with time zone DEFAULT now() CONSTRAINT operator_conflicts_at_not_null NOT NULL,
    reason text CONSTRAINT operator_conflicts_reason_not_null NOT NULL
);

CREATE SEQUENCE public.operator_conflicts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE public.operator_conflicts_id_seq OWNED BY public.operator_conflicts.id;

CREATE TABLE public.partitioned_tables (
    parent text NOT NULL,
    key_column text NOT NULL,
    bound text NOT NULL,
    period_days integer NOT NULL,
    prune_order integer NOT NULL,
    local_ddl text[] DEFAULT '{}'::text[] NOT NULL,
    guard text,
    CONSTRAINT partitioned_tables_bound_check CHECK ((bound = ANY (ARRAY['item_id'::text, 'time'::text]))),
    CONSTRAINT partitioned_tables_period_days_check CHECK ((period_days > 0))
);

CREATE VIEW public.requery_jobs_paging AS
 SELECT job_id,
    request_id,
    created_at,
    target_owner,
    target_lease_until
   FROM public.jobs
  WHERE ((target_mode = 'requery'::text) AND (dispatched_at IS NULL) AND ((target_complete_at IS NOT NULL) OR (status = 'running'::text)));

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.send_ledger (
    idem_key text NOT NULL,
    item_id uuid NOT NULL,
    guid text NOT NULL,
    to_id text NOT NULL,
    state text NOT NULL,
    receipt jsonb,
    reserved_at timestamp with time zone DEFAULT now() NOT NULL,
    sent_at timestamp with time zone,
    CONSTRAINT send_ledger_state_check CHECK ((state = ANY (ARRAY['reserved'::text, 'sent'::text])))
)
PARTITION BY RANGE (item_id);

CREATE TABLE public.send_ledger_default (
    idem_key text CONSTRAINT send_ledger_idem_key_not_null NOT NULL,
    item_id uuid CONSTRAINT send_ledger_item_id_not_null NOT NULL,
    guid text CONSTRAINT send_ledger_guid_not_null NOT NULL,
    to_id text CONSTRAINT send_ledger_to_id_not_null NOT NULL,
    state text CONSTRAINT send_ledger_state_not_null NOT NULL,
    receipt jsonb,
    reserved_at timestamp with time zone DEFAULT now() CONSTRAINT send_ledger_reserved_at_not_null NOT NULL,
    sent_at timestamp with time zone,
    CONSTRAINT send_ledger_state_check CHECK ((state = ANY (ARRAY['reserved'::text, 'sent'::text])))
);

CREATE TABLE public.sender_limits (
    owner text NOT NULL,
    limits jsonb NOT NULL,
    seen_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.shards (
    shard_id bigint NOT NULL,
    job_id uuid NOT NULL,
    guid text NOT NULL,
    sub integer DEFAULT 0 NOT NULL,
    total integer NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    last_progress_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    paused_reason text,
    paused_by text,
    subs integer DEFAULT 1 NOT NULL,
    CONSTRAINT shards_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'running'::text, 'paused'::text, 'completed'::text, 'failed'::text]))),
    CONSTRAINT shards_sub_check CHECK (((sub >= 0) AND (sub < subs))),
    CONSTRAINT shards_subs_check CHECK ((subs > 0))
);

CREATE VIEW public.shard_stall_inputs AS
 SELECT s.shard_id,
    s.job_id,
    s.guid,
    s.status,
    j.status AS job_status,
    GREATEST(COALESCE(s.last_progress_at, s.created_at), j.not_before, g.gateway_quiet_until) AS quiet_since,
    ((g.paused_reason IS NOT NULL) OR (COALESCE(h.state, 'online'::public.guid_state) <> 'online'::public.guid_state)) AS guid_held,
    gl.limits,
    g.windows,
    sl.limits AS sender_limits,
        CASE
            WHEN (jsonb_typeof((jl.limits -> 'min_interval_s'::text)) = 'number'::text) THEN ((jl.limits ->> 'min_interval_s'::text))::double precision
            ELSE (0)::double precision
        END AS job_gap,
        CASE
            WHEN ((g.owner IS NOT NULL) AND (g.lease_until > now())) THEN COALESCE(g.penalty, (1)::double precision)
            ELSE (1)::double precision
        END AS penalty
   FROM ((((((public.shards s
     JOIN public.jobs j ON ((j.job_id = s.job_id)))
     LEFT JOIN public.guid_leases g ON ((g.guid = s.guid)))
     LEFT JOIN public.guid_states h ON ((h.guid = s.guid)))
     LEFT JOIN public.guid_limits gl ON ((gl.guid = s.guid)))
     LEFT JOIN public.sender_limits sl ON ((sl.owner = g.owner)))
     LEFT JOIN public.guid_limits jl ON ((jl.guid = ('job:'::text || (s.job_id)::text))));

CREATE TABLE public.shard_status_counts (
    shard_id bigint NOT NULL,
    status public.item_status NOT NULL,
    n bigint NOT NULL
);

ALTER TABLE public.shards ALTER COLUMN shard_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.shards_shard_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.tenant_guids (
    guid text NOT NULL,
    tenant text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.tenant_usage (
    tenant text NOT NULL,
    day date NOT NULL,
    sends bigint DEFAULT 0 NOT NULL
);

CREATE TABLE public.tenant_usage_flushes (
    sender text NOT NULL,
    seq bigint NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.tenants (
    name text NOT NULL,
    base_url text,
    credential text,
    callback_secret text,
    sends_per_day integer,
    max_guids integer,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    timezone text,
    CONSTRAINT tenants_max_guids_check CHECK ((max_guids > 0)),
    CONSTRAINT tenants_name_check CHECK ((name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'::text)),
    CONSTRAINT tenants_sends_per_day_check CHECK ((sends_per_day > 0))
);

ALTER TABLE ONLY public.audit_log ATTACH PARTITION public.audit_log_default DEFAULT;

ALTER TABLE ONLY public.guid_state_history ATTACH PARTITION public.guid_state_history_default DEFAULT;

ALTER TABLE ONLY public.item_events ATTACH PARTITION public.item_events_default DEFAULT;

ALTER TABLE ONLY public.items ATTACH PARTITION public.items_default DEFAULT;

ALTER TABLE ONLY public.operator_conflicts ATTACH PARTITION public.operator_conflicts_default DEFAULT;

ALTER TABLE ONLY public.send_ledger ATTACH PARTITION public.send_ledger_default DEFAULT;

ALTER TABLE ONLY public.audit_log ALTER COLUMN id SET DEFAULT nextval('public.audit_log_id_seq'::regclass);

ALTER TABLE ONLY public.guid_state_history ALTER COLUMN id SET DEFAULT nextval('public.guid_state_history_id_seq'::regclass);

ALTER TABLE ONLY public.item_events ALTER COLUMN seq SET DEFAULT nextval('public.item_events_seq_seq'::regclass);

ALTER TABLE ONLY public.operator_conflicts ALTER COLUMN id SET DEFAULT nextval('public.operator_conflicts_id_seq'::regclass);

ALTER TABLE ONLY public.api_tokens
    ADD CONSTRAINT api_tokens_name_key UNIQUE (name);

ALTER TABLE ONLY public.api_tokens
    ADD CONSTRAINT api_tokens_pkey PRIMARY KEY (token_hash);

ALTER TABLE ONLY public.approved_contents
    ADD CONSTRAINT approved_contents_pkey PRIMARY KEY (content_hash);

ALTER TABLE ONLY public.audit_log
    ADD CONSTRAINT audit_log_pkey PRIMARY KEY (id, at);

ALTER TABLE ONLY public.audit_log_default
    ADD CONSTRAINT audit_log_default_pkey PRIMARY KEY (id, at);

ALTER TABLE ONLY public.consumer_positions
    ADD CONSTRAINT consumer_positions_pkey PRIMARY KEY (group_id, topic, kafka_partition);

ALTER TABLE ONLY public.customers
    ADD CONSTRAINT customers_pkey PRIMARY KEY (customer_id);

ALTER TABLE ONLY public.guid_leases
    ADD CONSTRAINT guid_leases_pkey PRIMARY KEY (guid);

ALTER TABLE ONLY public.guid_limits
    ADD CONSTRAINT guid_limits_pkey PRIMARY KEY (guid);

ALTER TABLE ONLY public.guid_state_history
    ADD CONSTRAINT guid_state_history_pkey PRIMARY KEY (id, at);

ALTER TABLE ONLY public.guid_state_history_default
    ADD CONSTRAINT guid_state_history_default_pkey PRIMARY KEY (id, at);

ALTER TABLE ONLY public.guid_states
    ADD CONSTRAINT guid_states_pkey PRIMARY KEY (guid);

ALTER TABLE ONLY public.hold_releases
    ADD CONSTRAINT hold_releases_pkey PRIMARY KEY (scope, key);

ALTER TABLE ONLY public.item_events
    ADD CONSTRAINT item_events_pkey PRIMARY KEY (item_id, version);

ALTER TABLE ONLY public.item_events_default
    ADD CONSTRAINT item_events_default_pkey PRIMARY KEY (item_id, version);

ALTER TABLE ONLY public.item_transitions
    ADD CONSTRAINT item_transitions_pkey PRIMARY KEY (from_status, to_status);

ALTER TABLE ONLY public.items
    ADD CONSTRAINT items_pkey PRIMARY KEY (item_id);

ALTER TABLE ONLY public.items_default
    ADD CONSTRAINT items_default_pkey PRIMARY KEY (item_id);

ALTER TABLE ONLY public.job_target_pages
    ADD CONSTRAINT job_target_pages_pkey PRIMARY KEY (job_id, page_no);

ALTER TABLE ONLY public.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (job_id);

ALTER TABLE ONLY public.jobs
    ADD CONSTRAINT jobs_request_id_key UNIQUE (request_id);

ALTER TABLE ONLY public.leader_leases
    ADD CONSTRAINT leader_leases_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.log_cursors
    ADD CONSTRAINT log_cursors_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.media
    ADD CONSTRAINT media_pkey PRIMARY KEY (guid, url_hash);

ALTER TABLE ONLY public.operator_conflicts
    ADD CONSTRAINT operator_conflicts_pkey PRIMARY KEY (id, at);

ALTER TABLE ONLY public.operator_conflicts_default
    ADD CONSTRAINT operator_conflicts_default_pkey PRIMARY KEY (id, at);

ALTER TABLE ONLY public.partitioned_tables
    ADD CONSTRAINT partitioned_tables_pkey PRIMARY KEY (parent);

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

ALTER TABLE ONLY public.send_ledger
    ADD CONSTRAINT send_ledger_pkey PRIMARY KEY (idem_key, item_id);

ALTER TABLE ONLY public.send_ledger_default
    ADD CONSTRAINT send_ledger_default_pkey PRIMARY KEY (idem_key, item_id);

ALTER TABLE ONLY public.sender_limits
    ADD CONSTRAINT sender_limits_pkey PRIMARY KEY (owner);

ALTER TABLE ONLY public.shard_status_counts
    ADD CONSTRAINT shard_status_counts_pkey PRIMARY KEY (shard_id, status);

ALTER TABLE ONLY public.shards
    ADD CONSTRAINT shards_job_id_guid_sub_key UNIQUE (job_id, guid, sub);

ALTER TABLE ONLY public.shards
    ADD CONSTRAINT shards_pkey PRIMARY KEY (shard_id);

ALTER TABLE ONLY public.tenant_guids
    ADD CONSTRAINT tenant_guids_pkey PRIMARY KEY (guid);

ALTER TABLE ONLY public.tenant_usage_flushes
    ADD CONSTRAINT tenant_usage_flushes_pkey PRIMARY KEY (sender);

ALTER TABLE ONLY public.tenant_usage
    ADD CONSTRAINT tenant_usage_pkey PRIMARY KEY (tenant, day);

ALTER TABLE ONLY public.tenants
    ADD CONSTRAINT tenants_pkey PRIMARY KEY (name);

CREATE UNIQUE INDEX audit_log_default_id_key ON public.audit_log_default USING btree (id);

CREATE INDEX audit_log_tail ON ONLY public.audit_log USING btree (xid, id);

CREATE INDEX audit_log_tail_default ON public.audit_log_default USING btree (xid, id);

CREATE INDEX audit_log_target ON ONLY public.audit_log USING btree (target_type, target_id, id);

CREATE INDEX audit_log_target_default ON public.audit_log_default USING btree (target_type, target_id, id);

CREATE INDEX guid_leases_paused ON public.guid_leases USING btree (guid) WHERE (paused_reason IS NOT NULL);

CREATE INDEX guid_leases_penalized ON public.guid_leases USING btree (guid) WHERE (penalty IS NOT NULL);

CREATE INDEX guid_leases_quiet ON public.guid_leases USING btree (gateway_quiet_until) WHERE (gateway_quiet_until IS NOT NULL);

CREATE INDEX guid_limits_change ON public.guid_limits USING btree (change_xid);

CREATE INDEX guid_limits_updated ON public.guid_limits USING btree (updated_at);

CREATE UNIQUE INDEX guid_state_history_default_id_key ON public.guid_state_history_default USING btree (id);

CREATE INDEX guid_state_history_guid ON ONLY public.guid_state_history USING btree (guid, id);

CREATE INDEX guid_state_history_guid_default ON public.guid_state_history_default USING btree (guid, id);

CREATE INDEX guid_states_held ON public.guid_states USING btree (guid) WHERE (state <> 'online'::public.guid_state);

CREATE INDEX item_events_duplicates ON ONLY public.item_events USING btree (occurred_at) WHERE (type = 'ItemDuplicateIntercepted'::text);

CREATE INDEX item_events_duplicates_default ON public.item_events_default USING btree (occurred_at) WHERE (type = 'ItemDuplicateIntercepted'::text);

CREATE INDEX item_events_position ON ONLY public.item_events USING btree (xid, seq);

CREATE INDEX item_events_position_default ON public.item_events_default USING btree (xid, seq);

CREATE INDEX item_events_segment_16 ON ONLY public.item_events USING btree ((((hashtext(guid) & 2147483647) % 16)), xid, seq);

CREATE INDEX item_events_segment_16_default ON public.item_events_default USING btree ((((hashtext(guid) & 2147483647) % 16)), xid, seq);

CREATE INDEX items_compensates ON ONLY public.items USING btree (compensates) WHERE (compensates IS NOT NULL);

CREATE INDEX items_compensates_default ON public.items_default USING btree (compensates) WHERE (compensates IS NOT NULL);

CREATE INDEX items_expire_due ON ONLY public.items USING btree (expire_at) WHERE ((status = ANY (ARRAY['pending'::public.item_status, 'waiting_retry'::public.item_status])) AND (expire_at IS NOT NULL));

CREATE INDEX items_expire_due_default ON public.items_default USING btree (expire_at) WHERE ((status = ANY (ARRAY['pending'::public.item_status, 'waiting_retry'::public.item_status])) AND (expire_at IS NOT NULL));

CREATE INDEX items_guid_in_flight ON ONLY public.items USING btree (guid) WHERE (status = ANY (ARRAY['claimed'::public.item_status, 'submitted'::public.item_status]));

CREATE INDEX items_guid_in_flight_default ON public.items_default USING btree (guid) WHERE (status = ANY (ARRAY['claimed'::public.item_status, 'submitted'::public.item_status]));

CREATE INDEX items_guid_queued ON ONLY public.items USING btree (guid) WHERE (status = ANY (ARRAY['pending'::public.item_status, 'waiting_retry'::public.item_status]));

CREATE INDEX items_guid_queued_bucket ON ONLY public.items USING btree (((public.pacer_guid_crc(guid) % (5760)::bigint)), guid) WHERE (status = ANY (ARRAY['pending'::public.item_status, 'waiting_retry'::public.item_status]));

CREATE INDEX items_guid_queued_bucket_default ON public.items_default USING btree (((public.pacer_guid_crc(guid) % (5760)::bigint)), guid) WHERE (status = ANY (ARRAY['pending'::public.item_status, 'waiting_retry'::public.item_status]));

CREATE INDEX items_guid_queued_default ON public.items_default USING btree (guid) WHERE (status = ANY (ARRAY['pending'::public.item_status, 'waiting_retry'::public.item_status]));

CREATE INDEX items_guid_ready ON ONLY public.items USING btree (guid, priority, job_id, COALESCE(not_before, created_at), item_id) WHERE ((status = 'pending'::public.item_status) AND (NOT held));

CREATE INDEX items_guid_ready_default ON public.items_default USING btree (guid, priority, job_id, COALESCE(not_before, created_at), item_id) WHERE ((status = 'pending'::public.item_status) AND (NOT held));

CREATE INDEX items_held ON ONLY public.items USING btree (job_id) WHERE (held AND (status = 'pending'::public.item_status));

CREATE INDEX items_held_default ON public.items_default USING btree (job_id) WHERE (held AND (status = 'pending'::public.item_status));

CREATE INDEX items_held_guid ON ONLY public.items USING btree (guid) WHERE (held AND (status = 'pending'::public.item_status));

CREATE INDEX items_held_guid_default ON public.items_default USING btree (guid) WHERE (held AND (status = 'pending'::public.item_status));

CREATE INDEX items_held_shard ON ONLY public.items USING btree (shard_id) WHERE (held AND (status = 'pending'::public.item_status));

CREATE INDEX items_held_shard_default ON public.items_default USING btree (shard_id) WHERE (held AND (status = 'pending'::public.item_status));

CREATE INDEX items_job_error ON ONLY public.items USING btree (job_id, last_error_class) WHERE (last_error_class IS NOT NULL);

CREATE INDEX items_job_error_default ON public.items_default USING btree (job_id, last_error_class) WHERE (last_error_class IS NOT NULL);

CREATE INDEX items_job_status ON ONLY public.items USING btree (job_id, status);

CREATE INDEX items_job_status_default ON public.items_default USING btree (job_id, status);

CREATE INDEX items_lease ON ONLY public.items USING btree (lease_until) WHERE (status = ANY (ARRAY['claimed'::public.item_status, 'submitted'::public.item_status]));

CREATE INDEX items_lease_default ON public.items_default USING btree (lease_until) WHERE (status = ANY (ARRAY['claimed'::public.item_status, 'submitted'::public.item_status]));

CREATE INDEX items_recovery ON ONLY public.items USING btree (updated_at) WHERE (status = 'recovery_pending'::public.item_status);

CREATE INDEX items_recovery_default ON public.items_default USING btree (updated_at) WHERE (status = 'recovery_pending'::public.item_status);

CREATE UNIQUE INDEX items_requery_target ON public.items_default USING btree (job_id, guid, to_id) WHERE (target_page IS NOT NULL);

CREATE INDEX items_retry_due ON ONLY public.items USING btree (next_attempt_at) WHERE (status = 'waiting_retry'::public.item_status);

CREATE INDEX items_retry_due_default ON public.items_default USING btree (next_attempt_at) WHERE (status = 'waiting_retry'::public.item_status);

CREATE INDEX items_unverified ON ONLY public.items USING btree (updated_at) WHERE (status = 'unverified'::public.item_status);

CREATE INDEX items_unverified_default ON public.items_default USING btree (updated_at) WHERE (status = 'unverified'::public.item_status);

CREATE INDEX jobs_coalesce ON public.jobs USING btree (coalesce_key, coalesce_version) WHERE (coalesce_key IS NOT NULL);

CREATE INDEX jobs_created ON public.jobs USING btree (created_at DESC);

CREATE INDEX jobs_requery_open ON public.jobs USING btree (created_at) WHERE ((target_mode = 'requery'::text) AND (dispatched_at IS NULL));

CREATE INDEX jobs_tenant ON public.jobs USING btree (tenant, created_at);

CREATE UNIQUE INDEX media_by_id ON public.media USING btree (guid, media_id);

CREATE UNIQUE INDEX operator_conflicts_default_id_key ON public.operator_conflicts_default USING btree (id);

CREATE INDEX operator_conflicts_item ON ONLY public.operator_conflicts USING btree (item_id, at);

CREATE INDEX operator_conflicts_item_default ON public.operator_conflicts_default USING btree (item_id, at);

CREATE UNIQUE INDEX send_ledger_default_idem_key_key ON public.send_ledger_default USING btree (idem_key);

CREATE INDEX shards_open ON public.shards USING btree (job_id) WHERE (status <> 'completed'::text);

CREATE INDEX tenant_guids_tenant ON public.tenant_guids USING btree (tenant);

ALTER INDEX public.audit_log_pkey ATTACH PARTITION public.audit_log_default_pkey;

ALTER INDEX public.audit_log_tail ATTACH PARTITION public.audit_log_tail_default;

ALTER INDEX public.audit_log_target ATTACH PARTITION public.audit_log_target_default;

ALTER INDEX public.guid_state_history_pkey ATTACH PARTITION public.guid_state_history_default_pkey;

ALTER INDEX public.guid_state_history_guid ATTACH PARTITION public.guid_state_history_guid_default;

ALTER INDEX public.item_events_pkey ATTACH PARTITION public.item_events_default_pkey;

ALTER INDEX public.item_events_duplicates ATTACH PARTITION public.item_events_duplicates_default;

ALTER INDEX public.item_events_position ATTACH PARTITION public.item_events_position_default;

ALTER INDEX public.item_events_segment_16 ATTACH PARTITION public.item_events_segment_16_default;

ALTER INDEX public.items_compensates ATTACH PARTITION public.items_compensates_default;

ALTER INDEX public.items_pkey ATTACH PARTITION public.items_default_pkey;

ALTER INDEX public.items_expire_due ATTACH PARTITION public.items_expire_due_default;

ALTER INDEX public.items_guid_in_flight ATTACH PARTITION public.items_guid_in_flight_default;

ALTER INDEX public.items_guid_queued_bucket ATTACH PARTITION public.items_guid_queued_bucket_default;

ALTER INDEX public.items_guid_queued ATTACH PARTITION public.items_guid_queued_default;

ALTER INDEX public.items_guid_ready ATTACH PARTITION public.items_guid_ready_default;

ALTER INDEX public.items_held ATTACH PARTITION public.items_held_default;

ALTER INDEX public.items_held_guid ATTACH PARTITION public.items_held_guid_default;

ALTER INDEX public.items_held_shard ATTACH PARTITION public.items_held_shard_default;

ALTER INDEX public.items_job_error ATTACH PARTITION public.items_job_error_default;

ALTER INDEX public.items_job_status ATTACH PARTITION public.items_job_status_default;

ALTER INDEX public.items_lease ATTACH PARTITION public.items_lease_default;

ALTER INDEX public.items_recovery ATTACH PARTITION public.items_recovery_default;

ALTER INDEX public.items_retry_due ATTACH PARTITION public.items_retry_due_default;

ALTER INDEX public.items_unverified ATTACH PARTITION public.items_unverified_default;

ALTER INDEX public.operator_conflicts_pkey ATTACH PARTITION public.operator_conflicts_default_pkey;

ALTER INDEX public.operator_conflicts_item ATTACH PARTITION public.operator_conflicts_item_default;

ALTER INDEX public.send_ledger_pkey ATTACH PARTITION public.send_ledger_default_pkey;

CREATE TRIGGER guid_limits_change BEFORE INSERT OR UPDATE ON public.guid_limits FOR EACH ROW EXECUTE FUNCTION public.pacer_stamp_limits_change();

CREATE TRIGGER guid_limits_timezone BEFORE INSERT OR UPDATE OF limits ON public.guid_limits FOR EACH ROW EXECUTE FUNCTION public.pacer_check_limits_timezone();

CREATE TRIGGER guid_send_windows BEFORE UPDATE OF last_send_at ON public.guid_leases FOR EACH ROW EXECUTE FUNCTION public.pacer_count_send_windows();

CREATE TRIGGER guid_states_online AFTER UPDATE OF state ON public.guid_states FOR EACH ROW WHEN (((old.state <> 'online'::public.guid_state) AND (new.state = 'online'::public.guid_state))) EXECUTE FUNCTION public.pacer_request_release('guid');

CREATE TRIGGER guids_hold_lifted AFTER UPDATE OF paused_reason ON public.guid_leases FOR EACH ROW WHEN (((old.paused_reason IS NOT NULL) AND (new.paused_reason IS NULL))) EXECUTE FUNCTION public.pacer_request_release('guid');

CREATE TRIGGER jobs_hold_lifted AFTER UPDATE OF status ON public.jobs FOR EACH ROW WHEN (((old.status <> 'running'::text) AND (new.status = 'running'::text))) EXECUTE FUNCTION public.pacer_request_release('job');

CREATE TRIGGER jobs_requery_completion BEFORE UPDATE OF status ON public.jobs FOR EACH ROW WHEN ((new.status = 'completed'::text)) EXECUTE FUNCTION public.pacer_guard_requery_completion();

CREATE TRIGGER shards_hold_lifted AFTER UPDATE OF status ON public.shards FOR EACH ROW WHEN (((old.status = 'paused'::text) AND (new.status <> 'paused'::text))) EXECUTE FUNCTION public.pacer_request_release('shard');

CREATE TRIGGER tenants_timezone BEFORE INSERT OR UPDATE OF timezone ON public.tenants FOR EACH ROW EXECUTE FUNCTION public.pacer_check_tenant_timezone();

ALTER TABLE ONLY public.job_target_pages
    ADD CONSTRAINT job_target_pages_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(job_id);

ALTER TABLE ONLY public.jobs
    ADD CONSTRAINT jobs_tenant_fkey FOREIGN KEY (tenant) REFERENCES public.tenants(name);

ALTER TABLE ONLY public.shard_status_counts
    ADD CONSTRAINT shard_status_counts_shard_id_fkey FOREIGN KEY (shard_id) REFERENCES public.shards(shard_id);

ALTER TABLE ONLY public.shards
    ADD CONSTRAINT shards_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(job_id);

ALTER TABLE ONLY public.tenant_guids
    ADD CONSTRAINT tenant_guids_tenant_fkey FOREIGN KEY (tenant) REFERENCES public.tenants(name);

ALTER TABLE ONLY public.tenant_usage
    ADD CONSTRAINT tenant_usage_tenant_fkey FOREIGN KEY (tenant) REFERENCES public.tenants(name);
