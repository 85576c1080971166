-- -- item leases: forced release --------------------------------------------------------------
-- claimed → pending (nothing was sent), submitted → recovery_pending (it may have been sent:
-- verified, never resent blindly); either way with a new fencing epoch, so the holder's
-- confirm or settle is refused. Audited. Outcomes: done, conflict (holds no lease, or not the
-- expected holder), not_found. p_expected_owner / p_expected_epoch (either, both or neither):
-- the lease the admin saw and confirmed; a lease another claim holds now is not released.
-- Without them, whoever holds the item's lease loses it (the API's callers before they existed).
-- A submitted item keeps its lease's end (lease_until; the holder, lease_owner, is cleared):
-- the fence stops the holder's bookkeeping, not its gateway call, which it may still write
-- until its send deadline (a quarter of the lease after the claim) and the gateway act on up
-- to its timeout after that, both before the lease would have run out. The verifier looks
-- the send up no sooner than then (due_in_doubt.sql): a lookup before it could find nothing,
-- make the item pending, free its key and send it a second time.
-- Its ItemInDoubt carries error_class in_doubt and the error, as the item's row does, and
-- source forced_release: an admin's act, no answer of the gateway, so the reconciler's
-- circuit breakers count it neither as a failure nor as a success of its job and guid.
DROP FUNCTION IF EXISTS pacer_force_release_item(uuid, text, text);  -- without the expected holder
CREATE OR REPLACE FUNCTION pacer_force_release_item(p_item uuid, p_actor text, p_reason text DEFAULT NULL,
                                                    p_expected_owner text DEFAULT NULL,
                                                    p_expected_epoch bigint DEFAULT NULL)
RETURNS TABLE (outcome text, message text, from_status text, to_status text, epoch bigint)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
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
$fn$;
