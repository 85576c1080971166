-- Status changes as database functions: one round trip per step of an item's life.
--
-- item_transitions mirrors pacer_common.domain.status.TRANSITIONS (a test keeps them equal);
-- pacer_transition refuses, loudly, any change the table does not allow.

CREATE TABLE item_transitions (
    from_status item_status NOT NULL,
    to_status   item_status NOT NULL,
    PRIMARY KEY (from_status, to_status)
);
INSERT INTO item_transitions (from_status, to_status) VALUES
    ('pending', 'abandoned'),
    ('pending', 'claimed'),
    ('pending', 'expired'),
    ('claimed', 'abandoned'),
    ('claimed', 'expired'),
    ('claimed', 'pending'),
    ('claimed', 'submitted'),
    ('submitted', 'confirmed'),
    ('submitted', 'failed'),
    ('submitted', 'recovery_pending'),
    ('submitted', 'waiting_retry'),
    ('waiting_retry', 'abandoned'),
    ('waiting_retry', 'expired'),
    ('waiting_retry', 'pending'),
    ('recovery_pending', 'confirmed'),
    ('recovery_pending', 'pending'),
    ('recovery_pending', 'unverified');

-- The only code that changes an item's status. Moves the given items that are in one of
-- p_from (and, when given, hold lease epoch p_epoch / have an expired lease) to p_to, and
-- appends one event per moved item in the same statement.
CREATE FUNCTION pacer_transition(
    p_ids uuid[], p_from item_status[], p_to item_status, p_type text,
    p_payload jsonb DEFAULT '{}', p_epoch bigint DEFAULT NULL, p_only_expired boolean DEFAULT false,
    p_lease_owner text DEFAULT NULL, p_lease_ttl interval DEFAULT NULL, p_clear_lease boolean DEFAULT false,
    p_attempt_bump integer DEFAULT 0, p_next_attempt_at timestamptz DEFAULT NULL,
    p_error_class text DEFAULT NULL, p_error text DEFAULT NULL)
RETURNS TABLE (item_id uuid, version integer, lease_epoch bigint, attempts integer, from_status item_status)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(p_from) AS f(s)
               WHERE NOT EXISTS (SELECT 1 FROM item_transitions t WHERE t.from_status = f.s AND t.to_status = p_to)) THEN
        RAISE EXCEPTION 'illegal item transition % -> %', p_from, p_to USING ERRCODE = 'check_violation';
    END IF;
    RETURN QUERY
    WITH target AS (
    SELECT item_id, status AS from_status
    FROM items
    WHERE item_id = ANY(p_ids)
      AND status = ANY(p_from)
      AND (p_epoch IS NULL OR lease_epoch = p_epoch)
      AND (NOT p_only_expired OR lease_until < now())
    ORDER BY item_id
    FOR UPDATE
), moved AS (
    UPDATE items AS i SET
        status          = p_to,
        version         = i.version + 1,
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
              i.attempts, target.from_status
)
, logged AS (
    INSERT INTO item_events (item_id, job_id, shard_id, guid, version, type, from_status, to_status, payload)
    SELECT item_id, job_id, shard_id, guid, version, p_type, from_status, p_to,
           p_payload
    FROM moved
)
SELECT m.item_id, m.version, m.lease_epoch, m.attempts, m.from_status FROM moved m;
END
$fn$;

-- Claim an item and write "submitted" in one transaction, before any gateway call:
-- pending → claimed (new lease, epoch + 1) → idempotency key reserved → submitted.
-- If another item holds the key, this one is abandoned as an intercepted duplicate.
CREATE FUNCTION pacer_begin_send(p_item uuid, p_owner text, p_ttl interval, p_idem_key text,
                                 p_guid text, p_to_id text)
RETURNS TABLE (outcome text, epoch bigint, attempts integer, holder text)
LANGUAGE plpgsql AS $fn$
DECLARE
    c record;
    h record;
BEGIN
    SELECT * INTO c FROM pacer_transition(ARRAY[p_item], '{pending}', 'claimed', 'ItemClaimed',
        jsonb_build_object('owner', p_owner), p_lease_owner => p_owner, p_lease_ttl => p_ttl);
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_pending'::text, NULL::bigint, NULL::integer, NULL::text;
        RETURN;
    END IF;
    INSERT INTO send_ledger (idem_key, item_id, guid, to_id, state)
    VALUES (p_idem_key, p_item, p_guid, p_to_id, 'reserved')
    ON CONFLICT (idem_key) DO NOTHING;
    SELECT l.item_id, l.state INTO h FROM send_ledger l WHERE l.idem_key = p_idem_key;
    IF h.item_id <> p_item THEN
        PERFORM pacer_transition(ARRAY[p_item], '{claimed}', 'abandoned', 'ItemDuplicateIntercepted',
            jsonb_build_object('idem_key', p_idem_key, 'holder', h.item_id), p_epoch => c.lease_epoch,
            p_clear_lease => true, p_error_class => 'duplicate',
            p_error => format('idempotency key already %s by item %s', h.state, h.item_id));
        RETURN QUERY SELECT 'duplicate'::text, c.lease_epoch, c.attempts, h.item_id::text;
        RETURN;
    END IF;
    PERFORM pacer_transition(ARRAY[p_item], '{claimed}', 'submitted', 'ItemSubmitted',
        jsonb_build_object('attempt', c.attempts + 1), p_epoch => c.lease_epoch, p_attempt_bump => 1);
    RETURN QUERY SELECT 'submitted'::text, c.lease_epoch, c.attempts, p_item::text;
END
$fn$;

-- The gateway accepted: submitted → confirmed, and the key is marked sent, together.
CREATE FUNCTION pacer_confirm(p_item uuid, p_epoch bigint, p_idem_key text, p_receipt jsonb)
RETURNS boolean
LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pacer_transition(ARRAY[p_item], '{submitted}', 'confirmed', 'ItemConfirmed',
        jsonb_build_object('receipt', p_receipt), p_epoch => p_epoch, p_clear_lease => true);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE send_ledger SET state = 'sent', receipt = p_receipt, sent_at = now()
    WHERE idem_key = p_idem_key AND item_id = p_item;
    RETURN true;
END
$fn$;

-- Any other answer: move from submitted as decided; free the key when nothing was sent.
CREATE FUNCTION pacer_settle(p_item uuid, p_epoch bigint, p_idem_key text, p_to item_status, p_type text,
                             p_error_class text, p_error text, p_next_attempt_at timestamptz,
                             p_release_ledger boolean)
RETURNS boolean
LANGUAGE plpgsql AS $fn$
BEGIN
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
    RETURN true;
END
$fn$;
