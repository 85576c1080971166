-- One executor per guid: a lease per guid in Postgres, not just Kafka's partition
-- assignment. The guid's last send time lives here too, so its pacing survives a handover.

CREATE TABLE guid_leases (
    guid         text PRIMARY KEY,
    owner        text,
    epoch        bigint NOT NULL DEFAULT 0,
    since        timestamptz,
    lease_until  timestamptz,
    renew_count  bigint NOT NULL DEFAULT 0,
    takeovers    bigint NOT NULL DEFAULT 0,
    last_send_at timestamptz
);

-- Take or keep the leases of these guids: free ones, expired ones and our own. A lease
-- still held by a live owner is left alone (the caller waits for release or expiry).
-- Returns what the caller now holds, with the last send time for pacing.
CREATE FUNCTION pacer_acquire_guids(p_guids text[], p_owner text, p_ttl interval)
RETURNS TABLE (guid text, epoch bigint, last_send_at timestamptz, took_over boolean, db_now timestamptz)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
BEGIN
    INSERT INTO guid_leases (guid) SELECT DISTINCT unnest(p_guids) ON CONFLICT DO NOTHING;
    RETURN QUERY
    WITH free AS (
        SELECT l.guid, l.owner AS prev_owner
        FROM guid_leases l
        WHERE l.guid = ANY(p_guids)
          AND (l.owner IS NULL OR l.owner = p_owner OR l.lease_until < now())
        ORDER BY l.guid
        FOR UPDATE
    )
    UPDATE guid_leases g SET
        epoch       = CASE WHEN free.prev_owner IS DISTINCT FROM p_owner THEN g.epoch + 1 ELSE g.epoch END,
        since       = CASE WHEN free.prev_owner IS DISTINCT FROM p_owner THEN now() ELSE g.since END,
        renew_count = CASE WHEN free.prev_owner = p_owner THEN g.renew_count + 1 ELSE 0 END,
        takeovers   = g.takeovers + CASE WHEN free.prev_owner IS NOT NULL AND free.prev_owner <> p_owner
                                         THEN 1 ELSE 0 END,
        owner       = p_owner,
        lease_until = now() + p_ttl
    FROM free
    WHERE g.guid = free.guid
    RETURNING g.guid, g.epoch, g.last_send_at,
              (free.prev_owner IS NOT NULL AND free.prev_owner <> p_owner), now();
END
$fn$;

CREATE FUNCTION pacer_release_guids(p_guids text[], p_owner text)
RETURNS integer
LANGUAGE sql AS $fn$
    WITH released AS (
        UPDATE guid_leases SET owner = NULL, lease_until = NULL
        WHERE guid = ANY(p_guids) AND owner = p_owner
        RETURNING 1
    )
    SELECT count(*)::integer FROM released;
$fn$;

-- pacer_begin_send now also requires the caller to hold the guid's lease, and records the
-- send time on it: two senders can never both submit for one guid.
CREATE OR REPLACE FUNCTION pacer_begin_send(p_item uuid, p_owner text, p_ttl interval, p_idem_key text,
                                            p_guid text, p_to_id text)
RETURNS TABLE (outcome text, epoch bigint, attempts integer, holder text)
LANGUAGE plpgsql AS $fn$
DECLARE
    c record;
    h record;
BEGIN
    PERFORM 1 FROM guid_leases
    WHERE guid = p_guid AND owner = p_owner AND lease_until > now()
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'guid_lost'::text, NULL::bigint, NULL::integer, NULL::text;
        RETURN;
    END IF;
    SELECT * INTO c FROM pacer_transition(ARRAY[p_item], '{pending}', 'claimed', 'ItemClaimed',
        jsonb_build_object('owner', p_owner), p_lease_owner => p_owner, p_lease_ttl => p_ttl);
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_pending'::text, NULL::bigint, NULL::integer, NULL::text;
        RETURN;
    END IF;
    INSERT INTO send_ledger (idem_key, item_id, guid, to_id, state)
    VALUES (p_idem_key, p_item, p_guid, p_to_id, 'reserved')
    ON CONFLICT (idem_key) DO NOTHING;
    SELECT l.item_id, l.state INTO h FROM send_ledger l WHERE l.idem_key = p_idem_key;
    IF h.item_id <> p_item THEN
        PERFORM pacer_transition(ARRAY[p_item], '{claimed}', 'abandoned', 'ItemDuplicateIntercepted',
            jsonb_build_object('idem_key', p_idem_key, 'holder', h.item_id), p_epoch => c.lease_epoch,
            p_clear_lease => true, p_error_class => 'duplicate',
            p_error => format('idempotency key already %s by item %s', h.state, h.item_id));
        RETURN QUERY SELECT 'duplicate'::text, c.lease_epoch, c.attempts, h.item_id::text;
        RETURN;
    END IF;
    PERFORM pacer_transition(ARRAY[p_item], '{claimed}', 'submitted', 'ItemSubmitted',
        jsonb_build_object('attempt', c.attempts + 1), p_epoch => c.lease_epoch, p_attempt_bump => 1);
    UPDATE guid_leases SET last_send_at = now() WHERE guid = p_guid;
    RETURN QUERY SELECT 'submitted'::text, c.lease_epoch, c.attempts, p_item::text;
END
$fn$;
