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

-- pacer_resolve_unverified: db/schema/functions/pacer_resolve_unverified.sql

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

-- pacer_content_hash: db/schema/functions/pacer_content_hash.sql

-- pacer_approval_reason: db/schema/functions/pacer_approval_reason.sql

-- pacer_decide_approval: db/schema/functions/pacer_decide_approval.sql

-- -- test sends -------------------------------------------------------------------------------
-- pacer_test_send: db/schema/functions/pacer_test_send.sql
