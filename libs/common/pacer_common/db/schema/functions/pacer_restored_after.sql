-- Whether the database was restored from a backup after p_item last changed: a restore epoch
-- is set (pacer_restore_epoch, the first step of `pacer after-restore`) and none of the item's
-- events carries it. What the database says of such an item is the backup's: between the
-- backup and the restore it may have been retried, or resolved as not delivered, and sent
-- under its idempotency key, and the ledger entry of that send was lost with the rest. So a
-- retry of it (pacer_compensate) or its resolution as not delivered (pacer_resolve_unverified)
-- is verified by a gateway lookup before anything sends it. An item that moved since the
-- restore needs none: `pacer after-restore` put it in doubt and the verifier looked its key
-- up, or it could not have been sent in between (not due yet), so every send of its key since
-- is in the ledger.
-- A database never restored has epoch 0: false at once, no event read.
CREATE OR REPLACE FUNCTION pacer_restored_after(p_item uuid) RETURNS boolean
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
    epoch bigint;
BEGIN
    SELECT pg_get_expr(d.adbin, d.adrelid)::bigint INTO epoch
    FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
    WHERE d.adrelid = 'item_events'::regclass AND a.attname = 'restore_epoch';
    RETURN COALESCE(epoch, 0) > 0
       AND NOT EXISTS (SELECT 1 FROM item_events e WHERE e.item_id = p_item AND e.restore_epoch >= epoch);
END
$fn$;
