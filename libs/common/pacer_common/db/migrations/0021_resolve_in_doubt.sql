-- In-doubt sends resolved by a person: an item left 'unverified' (the gateway could not say
-- whether it delivered) is decided by a tech_admin from what is known.
--
--   delivered     → unverified → confirmed ('ItemResolvedDelivered'); the ledger entry is
--                   kept and marked sent, so its idempotency key can never be sent again.
--   not delivered → unverified → pending ('ItemResolvedNotDelivered') through the guarded
--                   transition, which re-publishes its command; the ledger reservation is
--                   released so the send can be made again under the same key.
-- The audit record is written by the caller in the same transaction.

INSERT INTO item_transitions (from_status, to_status) VALUES ('unverified', 'confirmed'), ('unverified', 'pending');

CREATE FUNCTION pacer_resolve_unverified(p_item uuid, p_delivered boolean, p_actor text, p_reason text)
RETURNS TABLE (outcome text, message text, status text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    i items%ROWTYPE;
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
    ELSE
        DELETE FROM send_ledger WHERE idem_key = i.idem_key AND item_id = p_item AND state = 'reserved';
        PERFORM pacer_transition(ARRAY[p_item], '{unverified}', 'pending', 'ItemResolvedNotDelivered',
            jsonb_build_object('actor', p_actor, 'reason', p_reason), p_clear_lease => true);
        RETURN QUERY SELECT 'done'::text,
            format('item %s resolved as not delivered: pending again, it will be sent under the same key', p_item),
            'pending'::text;
    END IF;
END
$fn$;

-- The in-doubt list (console, GET /in-doubt) without a scan of every item.
CREATE INDEX items_unverified ON items (updated_at) WHERE status = 'unverified';

-- -- approvals ---------------------------------------------------------------------------------
-- A job the planner judges needs a person's look (more items than
-- PACER_PLANNER_APPROVAL_ABOVE_ITEMS, or, with PACER_PLANNER_APPROVE_NEW_CONTENT, a message
-- never approved before) is stored as 'awaiting_approval', with the reason in paused_reason.
-- It is not 'running', so pacer_begin_send holds its items exactly as for a paused job, and
-- resume refuses it: only an admin's approval (→ running; the release trigger sends its held
-- items) or rejection (→ cancelled) moves it on.
ALTER TABLE jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_status_check
    CHECK (status IN ('running', 'paused', 'completed', 'cancelled', 'terminated', 'awaiting_approval'));

-- Messages (templates) an admin has approved: a job sending one of them is not "new content".
CREATE TABLE approved_contents (
    content_hash text PRIMARY KEY,  -- md5 of the job's message (jsonb text: keys in a fixed order)
    approved_by  text NOT NULL,
    approved_at  timestamptz NOT NULL DEFAULT now(),
    job_id       uuid NOT NULL
);

CREATE FUNCTION pacer_content_hash(p_message jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $fn$ SELECT md5(p_message::text) $fn$;

-- Why a new job waits for approval, or NULL: the planner's policy applied at insert.
CREATE FUNCTION pacer_approval_reason(p_total bigint, p_message jsonb, p_above bigint, p_new_content boolean)
RETURNS text
LANGUAGE sql STABLE AS $fn$
    SELECT CASE
        WHEN p_above IS NOT NULL AND p_total > p_above
            THEN format('awaiting approval: %s items, above %s', p_total, p_above)
        WHEN p_new_content AND NOT EXISTS (
                SELECT 1 FROM approved_contents a WHERE a.content_hash = pacer_content_hash(p_message))
            THEN 'awaiting approval: new content (first send of this message)'
    END;
$fn$;

-- An admin approves (→ running, the message recorded as approved) or rejects (→ cancelled,
-- its items abandoned, nothing sent) a job awaiting approval. Audited.
CREATE FUNCTION pacer_decide_approval(p_job uuid, p_approve boolean, p_actor text, p_reason text)
RETURNS TABLE (outcome text, message text, status text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    j jobs%ROWTYPE;
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
    PERFORM pacer_audit(p_actor, CASE WHEN p_approve THEN 'approve' ELSE 'reject' END, 'job', p_job::text, p_reason,
        jsonb_build_object('status', j.status, 'paused_reason', j.paused_reason),
        jsonb_build_object('status', CASE WHEN p_approve THEN 'running' ELSE 'cancelled' END));
    IF p_approve THEN
        UPDATE jobs SET status = 'running', paused_reason = NULL, paused_by = NULL, paused_at = NULL
        WHERE job_id = p_job;
        INSERT INTO approved_contents (content_hash, approved_by, job_id)
        VALUES (pacer_content_hash(j.message), p_actor, p_job) ON CONFLICT DO NOTHING;
        RETURN QUERY SELECT 'done'::text, 'job approved: awaiting_approval → running; it starts sending'::text,
            'running'::text;
    ELSE
        PERFORM pacer_job_action(p_job, 'cancel', p_actor, COALESCE(p_reason, 'rejected'));
        RETURN QUERY SELECT 'done'::text, 'job rejected: awaiting_approval → cancelled; nothing was sent'::text,
            'cancelled'::text;
    END IF;
END
$fn$;

-- -- test sends -------------------------------------------------------------------------------
-- A test send to a sandbox target is a one-item job, sent like every other item: the
-- reconciler publishes its command from the creation event, a sender claims it under the
-- guid's lease, paced, with its key reserved in the ledger. Never held for approval (its
-- target is a sandbox). The caller audits it in the same transaction.
CREATE FUNCTION pacer_test_send(p_job uuid, p_item uuid, p_guid text, p_to_id text, p_content text,
                                p_actor text)
RETURNS TABLE (job_id uuid, item_id uuid, idem_key text)
LANGUAGE plpgsql AS $fn$
DECLARE
    s bigint;
    k text := 'test:' || p_item::text;
BEGIN
    INSERT INTO jobs (job_id, request_id, kind, priority, created_by, message, content_version, target_mode,
                      total, request, dispatched_at, target_fetched, target_complete_at)
    VALUES (p_job, 'test-send-' || p_job::text, 'campaign', 0, p_actor,
            jsonb_build_object('type', 'text', 'content', p_content), 1, 'snapshot', 1,
            jsonb_build_object('test_send', true, 'guid', p_guid, 'to_id', p_to_id), now(), 1, now());
    INSERT INTO shards (job_id, guid, total) VALUES (p_job, p_guid, 1) RETURNING shard_id INTO s;
    INSERT INTO shard_status_counts (shard_id, status, n) VALUES (s, 'pending', 1);
    INSERT INTO items (item_id, job_id, shard_id, guid, to_id, content, idem_key, priority, kind, status, version)
    VALUES (p_item, p_job, s, p_guid, p_to_id, p_content, k, 0, 'campaign', 'pending', 0);
    INSERT INTO item_events (item_id, job_id, shard_id, guid, version, type, from_status, to_status, payload)
    VALUES (p_item, p_job, s, p_guid, 0, 'ItemTestSendCreated', 'pending', 'pending',
            jsonb_build_object('actor', p_actor, 'to_id', p_to_id));
    RETURN QUERY SELECT p_job, p_item, k;
END
$fn$;
