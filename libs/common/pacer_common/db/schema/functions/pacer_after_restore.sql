-- After a restore from a backup (every service stopped): puts in doubt up to p_limit items the
-- restored database cannot vouch for, those that may have been sent between the backup and
-- the restore: claimed and submitted ones, and pending or waiting_retry ones already due.
-- Each goes to recovery_pending ('ItemInDoubt', payload restored: true with the actor and the
-- reason; lease cleared) and its idempotency key is reserved in send_ledger (unless an item
-- holds it already), so the reconciler's verifier asks the gateway before anything sends it:
-- found → confirmed, key kept; proved not delivered → pending, key released, sent again.
-- The payload carries error_class in_doubt and the error, as the item's row does, and source
-- after_restore: no answer of the gateway, so the reconciler's circuit breakers count it
-- neither as a failure nor as a success of its job and guid.
-- Items scheduled later (not due yet) cannot have been sent and are left alone, and so are
-- final and unverified ones, which nothing sends unless a person asks: a retry of one, or an
-- unverified one resolved as not delivered, is put in doubt then (pacer_restored_after: a
-- retry or that resolution may have been made and delivered after the backup). Returns how
-- many moved from each status; call it again until it moves none.
CREATE OR REPLACE FUNCTION pacer_after_restore(p_actor text, p_reason text, p_limit integer DEFAULT 50000)
RETURNS TABLE (from_status text, n bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    ids uuid[];
    why constant text := 'the database was restored from a backup: this send may have been made after the backup, '
                         'so it is verified before it is sent';
BEGIN
    SELECT array_agg(c.item_id) INTO ids FROM (
        SELECT i.item_id FROM items i
        WHERE i.status IN ('claimed', 'submitted')
           OR (i.status = 'pending' AND COALESCE(i.not_before, i.created_at) <= now())
           OR (i.status = 'waiting_retry' AND COALESCE(i.next_attempt_at, i.updated_at) <= now())
        LIMIT p_limit) c;
    IF ids IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH moved AS (
        SELECT t.item_id, t.from_status
        FROM pacer_transition(ids, '{pending,claimed,submitted,waiting_retry}', 'recovery_pending', 'ItemInDoubt',
                              jsonb_build_object('restored', true, 'actor', p_actor, 'reason', p_reason,
                                                 'source', 'after_restore', 'error_class', 'in_doubt', 'error', why),
                              p_clear_lease => true, p_error_class => 'in_doubt', p_error => why) AS t
    ), keys AS (
        INSERT INTO send_ledger (idem_key, item_id, guid, to_id, state)
        SELECT i.idem_key, i.item_id, i.guid, i.to_id, 'reserved'
        FROM items i JOIN moved m ON m.item_id = i.item_id
        WHERE NOT EXISTS (SELECT 1 FROM send_ledger l WHERE l.idem_key = i.idem_key)
        ON CONFLICT DO NOTHING
    )
    SELECT m.from_status::text, count(*) FROM moved m GROUP BY 1 ORDER BY 1;
END
$fn$;
