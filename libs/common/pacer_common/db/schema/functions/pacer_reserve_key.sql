-- Reserve p_item's idempotency key in send_ledger, unless an item holds it already: what an
-- item put in doubt needs, so that nothing sends the key until the verifier has asked the
-- gateway about it (a retry or a resolution made after a restore from a backup:
-- pacer_compensate, pacer_resolve_unverified). Under the key's advisory lock, held to the
-- commit, as pacer_begin_send takes it before it looks at the ledger. Returns whether this
-- item holds the key now.
CREATE OR REPLACE FUNCTION pacer_reserve_key(p_item uuid) RETURNS boolean
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
    i record;
BEGIN
    SELECT it.idem_key, it.guid, it.to_id INTO i FROM items it WHERE it.item_id = p_item;
    PERFORM pg_advisory_xact_lock(hashtextextended(i.idem_key, 0));
    INSERT INTO send_ledger (idem_key, item_id, guid, to_id, state)
    SELECT i.idem_key, p_item, i.guid, i.to_id, 'reserved'
    WHERE NOT EXISTS (SELECT 1 FROM send_ledger l WHERE l.idem_key = i.idem_key);
    RETURN EXISTS (SELECT 1 FROM send_ledger l WHERE l.idem_key = i.idem_key AND l.item_id = p_item);
END
$fn$;
