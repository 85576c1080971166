CREATE OR REPLACE FUNCTION pacer_resolve_unverified(p_item uuid, p_delivered boolean, p_actor text, p_reason text)
RETURNS TABLE (outcome text, message text, status text)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
#variable_conflict use_column
DECLARE
    i items%ROWTYPE;
    job_status text;
    newer integer;  -- the newest status version of its business id, when newer than its job's
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
        -- What becomes of it, said as it is: pending is not always sent (pacer_begin_send
        -- abandons an item of a cancelled job and expires one past its expire_at).
        SELECT j.status, (SELECT max(n.coalesce_version) FROM jobs n
                          WHERE n.coalesce_key = j.coalesce_key AND n.coalesce_version > j.coalesce_version)
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
$fn$;
