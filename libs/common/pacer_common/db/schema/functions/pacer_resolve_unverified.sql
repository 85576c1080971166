-- A person's decision on an unverified send: delivered → confirmed, its key kept and marked
-- sent; not delivered → pending, its key released, sent again under it. Except when the
-- database was restored from a backup after the item last changed (pacer_restored_after): it
-- may have been resolved and sent between the backup and the restore, that send's ledger entry
-- lost with the rest, so "not delivered" (perhaps made again from the audit log) is checked:
-- unverified → pending → recovery_pending ('ItemResolvedNotDelivered', then 'ItemInDoubt' with
-- restored: true), its key kept reserved, and the verifier asks the gateway: found →
-- confirmed, never sent again; not found → pending, sent; no answer → unverified again, and
-- resolved then as above, the lookup having been made since the restore. That ItemInDoubt
-- carries error_class in_doubt and the error, as the item's row does, and source resolved: a
-- person's decision, no answer of the gateway, so the reconciler's circuit breakers count it
-- neither as a failure nor as a success of its job and guid.
CREATE OR REPLACE FUNCTION pacer_resolve_unverified(p_item uuid, p_delivered boolean, p_actor text, p_reason text)
RETURNS TABLE (outcome text, message text, status text)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
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
$fn$;
