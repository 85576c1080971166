-- Cancel one item: only from pending / waiting_retry, through pacer_transition, so a cancel
-- racing a claim has exactly one winner. Cancel takes effect at item boundaries: an item in
-- flight finishes. If the item slipped back to a cancellable status between the guarded
-- write and the look at it (a lease expiry), the write is tried again.
CREATE OR REPLACE FUNCTION pacer_cancel_item(p_item uuid, p_actor text)
RETURNS TABLE (outcome text, message text)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
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
$fn$;
