-- Any answer but a confirmation: move from submitted as decided (p_to, p_type), fenced by
-- the lease epoch; free the idempotency key when nothing was sent (p_release_ledger); when
-- the gateway says the account is offline, kicked or unauthorized, p_hold_guid names that
-- lifecycle state and the guid takes it (source `send_failure`), which holds its queue. The
-- refusal is dated when the send began (the item's submission), not when it is settled: a
-- device.status callback dated after that may tell of a later state (the account back
-- online while the call was in flight), and it must not be overridden by this older news.
-- If it was wrong, the next send is refused again, later, and holds the guid then; dated at
-- the settle, the guid would stay held until another callback or an operator.
-- p_refund: the send did not happen and was no attempt (the gateway rate-limited the guid, or
-- the item, claimed ahead of its pacing gap's end, gave its turn to an online item), so the
-- attempt counted by pacer_begin_send is given back, and so is the budget unit if that send
-- counted one.
--
-- Earlier signatures (0002, 0008) are dropped first: CREATE OR REPLACE cannot change them.
DROP FUNCTION IF EXISTS pacer_settle(uuid, bigint, text, item_status, text, text, text, timestamptz, boolean);
DROP FUNCTION IF EXISTS pacer_settle(uuid, bigint, text, item_status, text, text, text, timestamptz, boolean, text);
CREATE OR REPLACE FUNCTION pacer_settle(p_item uuid, p_epoch bigint, p_idem_key text, p_to item_status, p_type text,
                             p_error_class text, p_error text, p_next_attempt_at timestamptz,
                             p_release_ledger boolean, p_hold_guid text DEFAULT NULL,
                             p_refund boolean DEFAULT false)
RETURNS boolean
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
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
$fn$;
