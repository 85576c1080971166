-- The gateway accepted: submitted → confirmed, and the key is marked sent, together. The
-- guid's last answer time is what a successor paces from (pacer_acquire_guids).
CREATE OR REPLACE FUNCTION pacer_confirm(p_item uuid, p_epoch bigint, p_idem_key text, p_receipt jsonb)
RETURNS boolean
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
BEGIN
    PERFORM pacer_transition(ARRAY[p_item], '{submitted}', 'confirmed', 'ItemConfirmed',
        jsonb_build_object('receipt', p_receipt), p_epoch => p_epoch, p_clear_lease => true);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE send_ledger SET state = 'sent', receipt = p_receipt, sent_at = now()
    WHERE idem_key = p_idem_key AND item_id = p_item;
    UPDATE guid_leases SET last_answer_at = clock_timestamp()
    WHERE guid = (SELECT i.guid FROM items i WHERE i.item_id = p_item);
    RETURN true;
END
$fn$;
