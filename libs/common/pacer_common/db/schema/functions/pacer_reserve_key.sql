-- Reserve p_item's idempotency key in send_ledger, unless an item holds it already: what an
-- item put in doubt needs, so that a send of another item with the key waits for the verifier
-- (a retry or a resolution made after a restore from a backup: pacer_compensate,
-- pacer_resolve_unverified). Returns whether this item holds the key now.
--
-- No advisory lock on the key, unlike pacer_begin_send's: an item in doubt is never sent
-- before the verifier has asked the gateway, so a race with a send of another item with the
-- key can only leave both reservations, and either way the key goes out once: found, this one
-- is confirmed unsent; not found, it goes to pending, and its own begin finds the other's row
-- under the lock and is abandoned as a duplicate (or sends, if that one was freed, unsent). A
-- lock per item would be held to the commit by a bulk retry of up to 10,000 items, out of the
-- shared lock table every session's locks come from.
CREATE OR REPLACE FUNCTION pacer_reserve_key(p_item uuid) RETURNS boolean
LANGUAGE sql AS $fn$
    WITH i AS (SELECT it.idem_key, it.guid, it.to_id FROM items it WHERE it.item_id = p_item),
    added AS (
        INSERT INTO send_ledger (idem_key, item_id, guid, to_id, state)
        SELECT i.idem_key, p_item, i.guid, i.to_id, 'reserved' FROM i
        WHERE NOT EXISTS (SELECT 1 FROM send_ledger l WHERE l.idem_key = i.idem_key)
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM added)
        OR EXISTS (SELECT 1 FROM send_ledger l, i WHERE l.idem_key = i.idem_key AND l.item_id = p_item)
$fn$;
