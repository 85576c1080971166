-- Governance: holds on jobs, shards and guids (pause / resume / cancel / terminate), send
-- budgets, coalescing of ticket notifications, API tokens and the audit log.
--
-- A hold never changes an item's status. pacer_begin_send refuses to claim an item whose
-- job is not running, whose shard is paused or whose guid is paused; it marks the item
-- ``held`` (still pending) and the sender drops the command. When the hold is lifted, the
-- reconciler's release sweep moves each held item pending → pending ('ItemReleased'), which
-- re-publishes its command exactly as any other return to pending does.

ALTER TABLE jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_status_check
    CHECK (status IN ('running', 'paused', 'completed', 'cancelled', 'terminated'));
ALTER TABLE jobs
    ADD COLUMN paused_reason    text,
    ADD COLUMN paused_by        text,
    ADD COLUMN paused_at        timestamptz,
    ADD COLUMN budget_used      bigint NOT NULL DEFAULT 0,
    ADD COLUMN coalesce_key     text,
    ADD COLUMN coalesce_version integer;
CREATE INDEX jobs_coalesce ON jobs (coalesce_key, coalesce_version) WHERE coalesce_key IS NOT NULL;
CREATE INDEX jobs_created ON jobs (created_at DESC);

ALTER TABLE shards
    ADD COLUMN paused_reason text,
    ADD COLUMN paused_by     text;

-- Guid health: a paused guid (offline, kicked, unauthorized, breaker, operator) sends nothing.
ALTER TABLE guid_leases
    ADD COLUMN paused_reason text,
    ADD COLUMN paused_by     text,
    ADD COLUMN paused_at     timestamptz;

ALTER TABLE items ADD COLUMN held boolean NOT NULL DEFAULT false;
CREATE INDEX items_held ON items (job_id) WHERE held AND status = 'pending';
CREATE INDEX items_job_error ON items (job_id, last_error_class) WHERE last_error_class IS NOT NULL;

-- A released hold: the item is still pending; the event re-publishes its command.
INSERT INTO item_transitions (from_status, to_status) VALUES ('pending', 'pending');

-- Who did what, when, to what, with the state before and after. Written in the same
-- transaction as the change it records, by people (API tokens) and by the system.
CREATE TABLE audit_log (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text NOT NULL,
    action      text NOT NULL,
    target_type text NOT NULL,
    target_id   text NOT NULL,
    reason      text,
    before      jsonb,
    after       jsonb
);
CREATE INDEX audit_log_target ON audit_log (target_type, target_id, id);

CREATE TABLE api_tokens (
    token_hash  text PRIMARY KEY,           -- sha256 of the token; the token itself is never stored
    name        text NOT NULL UNIQUE,
    role        text NOT NULL CHECK (role IN ('operator', 'tech_admin', 'admin')),
    created_by  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz,
    last_used_at timestamptz
);

CREATE FUNCTION pacer_audit(p_actor text, p_action text, p_type text, p_id text, p_reason text,
                            p_before jsonb, p_after jsonb)
RETURNS void
LANGUAGE sql AS $fn$
    INSERT INTO audit_log (actor, action, target_type, target_id, reason, before, after)
    VALUES (p_actor, p_action, p_type, p_id, p_reason, p_before, p_after);
$fn$;

-- Why an item may not be claimed now, or NULL. Takes the item's job, shard and guid state.
CREATE FUNCTION pacer_hold_reason(p_job_status text, p_job_reason text, p_shard_status text,
                                  p_shard_reason text, p_guid_reason text)
RETURNS text
LANGUAGE sql IMMUTABLE AS $fn$
    SELECT CASE
        WHEN p_job_status <> 'running' THEN 'job ' || p_job_status || COALESCE(': ' || p_job_reason, '')
        WHEN p_shard_status = 'paused' THEN 'shard paused' || COALESCE(': ' || p_shard_reason, '')
        WHEN p_guid_reason IS NOT NULL THEN 'guid paused: ' || p_guid_reason
    END;
$fn$;

-- pacer_begin_send, now also honouring holds and budgets. Outcome 'held': the item stays
-- pending, marked held, and ``holder`` carries the reason. A budgeted job counts each send
-- under its row lock; the send that would pass the budget pauses the job instead.
CREATE OR REPLACE FUNCTION pacer_begin_send(p_item uuid, p_owner text, p_ttl interval, p_idem_key text,
                                            p_guid text, p_to_id text)
RETURNS TABLE (outcome text, epoch bigint, attempts integer, holder text)
LANGUAGE plpgsql AS $fn$
DECLARE
    c record;
    h record;
    g record;
    x record;
    hold text;
    counted boolean := false;
BEGIN
    SELECT l.paused_reason INTO g FROM guid_leases l
    WHERE l.guid = p_guid AND l.owner = p_owner AND l.lease_until > now()
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'guid_lost'::text, NULL::bigint, NULL::integer, NULL::text;
        RETURN;
    END IF;
    SELECT i.status, i.job_id, j.status AS job_status, j.paused_reason AS job_reason, j.budget_max_sends,
           s.status AS shard_status, s.paused_reason AS shard_reason
    INTO x
    FROM items i JOIN jobs j ON j.job_id = i.job_id JOIN shards s ON s.shard_id = i.shard_id
    WHERE i.item_id = p_item;
    IF NOT FOUND OR x.status <> 'pending' THEN
        RETURN QUERY SELECT 'not_pending'::text, NULL::bigint, NULL::integer, NULL::text;
        RETURN;
    END IF;
    hold := pacer_hold_reason(x.job_status, x.job_reason, x.shard_status, x.shard_reason, g.paused_reason);
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
        RETURN QUERY SELECT 'held'::text, NULL::bigint, NULL::integer, hold;
        RETURN;
    END IF;
    SELECT * INTO c FROM pacer_transition(ARRAY[p_item], '{pending}', 'claimed', 'ItemClaimed',
        jsonb_build_object('owner', p_owner), p_lease_owner => p_owner, p_lease_ttl => p_ttl);
    IF NOT FOUND THEN
        IF counted THEN
            UPDATE jobs SET budget_used = budget_used - 1 WHERE job_id = x.job_id;
        END IF;
        RETURN QUERY SELECT 'not_pending'::text, NULL::bigint, NULL::integer, NULL::text;
        RETURN;
    END IF;
    INSERT INTO send_ledger (idem_key, item_id, guid, to_id, state)
    VALUES (p_idem_key, p_item, p_guid, p_to_id, 'reserved')
    ON CONFLICT (idem_key) DO NOTHING;
    SELECT l.item_id, l.state INTO h FROM send_ledger l WHERE l.idem_key = p_idem_key;
    IF h.item_id <> p_item THEN
        IF counted THEN
            UPDATE jobs SET budget_used = budget_used - 1 WHERE job_id = x.job_id;
        END IF;
        PERFORM pacer_transition(ARRAY[p_item], '{claimed}', 'abandoned', 'ItemDuplicateIntercepted',
            jsonb_build_object('idem_key', p_idem_key, 'holder', h.item_id), p_epoch => c.lease_epoch,
            p_clear_lease => true, p_error_class => 'duplicate',
            p_error => format('idempotency key already %s by item %s', h.state, h.item_id));
        RETURN QUERY SELECT 'duplicate'::text, c.lease_epoch, c.attempts, h.item_id::text;
        RETURN;
    END IF;
    PERFORM pacer_transition(ARRAY[p_item], '{claimed}', 'submitted', 'ItemSubmitted',
        jsonb_build_object('attempt', c.attempts + 1), p_epoch => c.lease_epoch, p_attempt_bump => 1);
    UPDATE guid_leases SET last_send_at = now() WHERE guid = p_guid;
    RETURN QUERY SELECT 'submitted'::text, c.lease_epoch, c.attempts, p_item::text;
END
$fn$;

-- Pause a running job by the system (budget, breaker), with an audit record. No-op otherwise.
CREATE FUNCTION pacer_hold_job(p_job uuid, p_reason text, p_actor text)
RETURNS boolean
LANGUAGE plpgsql AS $fn$
BEGIN
    UPDATE jobs SET status = 'paused', paused_reason = p_reason, paused_by = p_actor, paused_at = now()
    WHERE job_id = p_job AND status = 'running';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pacer_audit(p_actor, 'pause', 'job', p_job::text, p_reason,
                        jsonb_build_object('status', 'running'),
                        jsonb_build_object('status', 'paused', 'paused_reason', p_reason));
    RETURN true;
END
$fn$;

-- Pause a guid (health, breaker, operator), with an audit record. No-op if already paused.
CREATE FUNCTION pacer_hold_guid(p_guid text, p_reason text, p_actor text)
RETURNS boolean
LANGUAGE plpgsql AS $fn$
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
$fn$;

-- pacer_settle with one more duty: a needs-human answer pauses the item's guid in the same
-- transaction (p_hold_guid is the reason).
DROP FUNCTION pacer_settle(uuid, bigint, text, item_status, text, text, text, timestamptz, boolean);
CREATE FUNCTION pacer_settle(p_item uuid, p_epoch bigint, p_idem_key text, p_to item_status, p_type text,
                             p_error_class text, p_error text, p_next_attempt_at timestamptz,
                             p_release_ledger boolean, p_hold_guid text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql AS $fn$
DECLARE
    g text;
BEGIN
    SELECT i.guid INTO g FROM items i WHERE i.item_id = p_item;
    PERFORM pacer_transition(ARRAY[p_item], '{submitted}', p_to, p_type,
        jsonb_build_object('error_class', p_error_class, 'error', p_error), p_epoch => p_epoch,
        p_clear_lease => true, p_next_attempt_at => p_next_attempt_at,
        p_error_class => p_error_class, p_error => p_error);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF p_release_ledger THEN
        DELETE FROM send_ledger WHERE idem_key = p_idem_key AND item_id = p_item AND state = 'reserved';
    END IF;
    IF p_hold_guid IS NOT NULL THEN
        PERFORM pacer_hold_guid(g, p_hold_guid, 'system:gateway');
    END IF;
    RETURN true;
END
$fn$;

-- The release sweep: held items whose holds are all lifted go pending → pending
-- ('ItemReleased'), which makes the reconciler publish their commands again.
CREATE FUNCTION pacer_release_held(p_limit integer)
RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
    ids uuid[];
BEGIN
    SELECT array_agg(item_id) INTO ids FROM (
        SELECT i.item_id
        FROM items i
        JOIN jobs j ON j.job_id = i.job_id
        JOIN shards s ON s.shard_id = i.shard_id
        LEFT JOIN guid_leases g ON g.guid = i.guid
        WHERE i.held AND i.status = 'pending'
          AND pacer_hold_reason(j.status, j.paused_reason, s.status, s.paused_reason, g.paused_reason) IS NULL
        LIMIT p_limit
        FOR UPDATE OF i SKIP LOCKED
    ) AS c;
    IF ids IS NULL THEN
        RETURN 0;
    END IF;
    UPDATE items SET held = false WHERE item_id = ANY(ids);
    PERFORM pacer_transition(ids, '{pending}', 'pending', 'ItemReleased');
    RETURN cardinality(ids);
END
$fn$;

-- Operator actions on a job, decided under the job's row lock, audited in the same
-- transaction. Outcomes: done, noop (already so), conflict (not allowed now: message says
-- why), not_found.
--   pause     running → paused: no new claims; items in flight finish. Resumable.
--   resume    paused / terminated → running (held items are released by the reconciler).
--             A terminated job only once none of its items is in flight or in doubt; a job
--             paused for its budget only once the budget allows another send.
--   cancel    → cancelled: pending and waiting items abandoned; irreversible; nothing sent
--             is undone.
--   terminate running / paused → terminated: no new claims, resumable only after
--             reconciliation has settled every item in flight.
CREATE FUNCTION pacer_job_action(p_job uuid, p_action text, p_actor text, p_reason text DEFAULT NULL)
RETURNS TABLE (outcome text, message text, status text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    j jobs%ROWTYPE;
    n bigint;
    ids uuid[];
    after_status text;
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
        after_status := CASE WHEN EXISTS (
            SELECT 1 FROM items i WHERE i.job_id = p_job
              AND i.status IN ('pending', 'claimed', 'submitted', 'waiting_retry', 'recovery_pending'))
            THEN 'running' ELSE 'completed' END;
        UPDATE jobs SET status = after_status, paused_reason = NULL, paused_by = NULL, paused_at = NULL,
                        finished_at = CASE WHEN after_status = 'completed' THEN now() END
        WHERE job_id = p_job;
    ELSIF p_action = 'cancel' THEN
        IF j.status = 'cancelled' THEN
            RETURN QUERY SELECT 'noop'::text, 'job is already cancelled'::text, j.status;
            RETURN;
        ELSIF j.status = 'completed' THEN
            RETURN QUERY SELECT 'conflict'::text, 'job is completed; there is nothing left to cancel'::text, j.status;
            RETURN;
        END IF;
        UPDATE jobs SET status = 'cancelled', finished_at = now(), paused_reason = COALESCE(p_reason, 'cancelled'),
                        paused_by = p_actor, paused_at = now()
        WHERE job_id = p_job;
        SELECT array_agg(i.item_id) INTO ids FROM items i
        WHERE i.job_id = p_job AND i.status IN ('pending', 'waiting_retry');
        IF ids IS NOT NULL THEN
            PERFORM pacer_transition(ids, '{pending,waiting_retry}', 'abandoned', 'ItemCancelled',
                jsonb_build_object('actor', p_actor, 'error_class', 'cancelled', 'scope', 'job'),
                p_clear_lease => true, p_error_class => 'cancelled', p_error => format('job cancelled by %s', p_actor));
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
    RETURN QUERY SELECT 'done'::text, format('job %s: %s → %s', p_action, j.status, after_status), after_status;
END
$fn$;

-- Pause or resume one shard (a guid's part of a job). Audited.
CREATE FUNCTION pacer_shard_action(p_shard bigint, p_action text, p_actor text, p_reason text DEFAULT NULL)
RETURNS TABLE (outcome text, message text, status text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    s shards%ROWTYPE;
    after_status text;
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
        after_status := 'running';
        UPDATE shards SET status = 'running', paused_reason = NULL, paused_by = NULL WHERE shard_id = p_shard;
    ELSE
        RAISE EXCEPTION 'unknown shard action %', p_action USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pacer_audit(p_actor, p_action, 'shard', p_shard::text, p_reason,
        jsonb_build_object('status', s.status, 'paused_reason', s.paused_reason),
        jsonb_build_object('status', after_status, 'paused_reason', CASE WHEN after_status = 'paused'
                                                                     THEN COALESCE(p_reason, 'operator') END));
    RETURN QUERY SELECT 'done'::text, format('shard %s: %s → %s', p_action, s.status, after_status), after_status;
END
$fn$;

-- Resume a paused guid (an operator action: someone brought the account back). Audited.
CREATE FUNCTION pacer_resume_guid(p_guid text, p_actor text, p_reason text DEFAULT NULL)
RETURNS TABLE (outcome text, message text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    was text;
BEGIN
    SELECT l.paused_reason INTO was FROM guid_leases l WHERE l.guid = p_guid FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, format('no guid %s', p_guid);
        RETURN;
    END IF;
    IF was IS NULL THEN
        RETURN QUERY SELECT 'noop'::text, 'guid is not paused'::text;
        RETURN;
    END IF;
    UPDATE guid_leases SET paused_reason = NULL, paused_by = NULL, paused_at = NULL WHERE guid = p_guid;
    PERFORM pacer_audit(p_actor, 'resume', 'guid', p_guid, p_reason,
                        jsonb_build_object('paused', true, 'paused_reason', was), jsonb_build_object('paused', false));
    RETURN QUERY SELECT 'done'::text, format('guid %s resumed (was paused: %s)', p_guid, was);
END
$fn$;

-- Confirm a larger budget. A job paused because its budget ran out resumes. Audited.
CREATE FUNCTION pacer_confirm_budget(p_job uuid, p_max_sends bigint, p_actor text)
RETURNS TABLE (outcome text, message text, status text)
LANGUAGE plpgsql AS $fn$
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
    IF j.status = 'paused' AND j.paused_reason = 'budget_exhausted' THEN
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
$fn$;

-- Coalescing of ticket notifications: a newer status version of the same business id
-- supersedes older ones not yet sent; an older version arriving late is superseded at once.
-- Items already in flight finish. Returns the number of items superseded.
CREATE FUNCTION pacer_coalesce(p_job uuid)
RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
    j jobs%ROWTYPE;
    ids uuid[];
BEGIN
    SELECT * INTO j FROM jobs WHERE job_id = p_job;
    IF j.coalesce_key IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('pacer.coalesce:' || j.coalesce_key));
    SELECT array_agg(i.item_id) INTO ids
    FROM items i JOIN jobs o ON o.job_id = i.job_id
    WHERE o.coalesce_key = j.coalesce_key AND i.status IN ('pending', 'waiting_retry')
      AND (o.coalesce_version < j.coalesce_version
           OR (o.job_id = p_job AND EXISTS (SELECT 1 FROM jobs n WHERE n.coalesce_key = j.coalesce_key
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
$fn$;
