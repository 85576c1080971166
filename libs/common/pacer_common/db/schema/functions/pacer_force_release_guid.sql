-- An admin's forced release of a guid's lease, audited. The epoch moves on at once, so the
-- holder's renewal (owner and epoch) fails, and pacer_begin_send refuses it (no longer the
-- owner). Outcomes: done, noop (no holder), conflict (not the expected holder), not_found.
-- p_expected_owner / p_expected_epoch (either, both or neither): the holder the admin saw and
-- confirmed. A lease taken over since (another sender, or the same one again: a new epoch) is
-- not released: the admin confirmed evicting a stuck holder, not whoever holds it now.
-- Without them, whoever holds the lease is evicted (the API's callers before they existed).
DROP FUNCTION IF EXISTS pacer_force_release_guid(text, text, text);  -- without the expected holder
CREATE OR REPLACE FUNCTION pacer_force_release_guid(p_guid text, p_actor text, p_reason text DEFAULT NULL,
                                                    p_expected_owner text DEFAULT NULL,
                                                    p_expected_epoch bigint DEFAULT NULL)
RETURNS TABLE (outcome text, message text, previous_owner text, epoch bigint, evicted_until timestamptz,
               in_flight integer)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    l guid_leases%ROWTYPE;
    busy integer;
    until timestamptz;
BEGIN
    SELECT * INTO l FROM guid_leases WHERE guid = p_guid FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, format('no guid %s', p_guid), NULL::text, NULL::bigint,
                            NULL::timestamptz, 0;
        RETURN;
    END IF;
    IF l.owner IS NULL THEN
        RETURN QUERY SELECT 'noop'::text, format('guid %s has no lease holder; nothing to release', p_guid),
                            NULL::text, l.epoch, l.evicted_until, 0;
        RETURN;
    END IF;
    IF (p_expected_owner IS NOT NULL AND l.owner <> p_expected_owner)
       OR (p_expected_epoch IS NOT NULL AND l.epoch <> p_expected_epoch) THEN
        RETURN QUERY SELECT 'conflict'::text,
            format('not released: guid %s is held by %s (epoch %s) now, not by %s as confirmed; the lease changed '
                   'hands since. Look at the lease again and release it only if this holder is stuck',
                   p_guid, l.owner, l.epoch,
                   concat_ws(' ', p_expected_owner, '(epoch ' || p_expected_epoch || ')')),
            l.owner, l.epoch, l.evicted_until, 0;
        RETURN;
    END IF;
    SELECT count(*) INTO busy FROM items i
    WHERE i.guid = p_guid AND i.status IN ('claimed', 'submitted') AND i.lease_owner = l.owner
      AND i.lease_until > now();
    until := GREATEST(l.lease_until, now());
    UPDATE guid_leases SET owner = NULL, lease_until = NULL, epoch = l.epoch + 1,
                           forced_releases = l.forced_releases + 1, released_by = p_actor, released_at = now(),
                           evicted_owner = l.owner, evicted_until = until
    WHERE guid = p_guid;
    PERFORM pacer_audit(p_actor, 'release_lock', 'guid', p_guid, p_reason,
        jsonb_build_object('owner', l.owner, 'epoch', l.epoch, 'lease_until', l.lease_until,
                           'expired', l.lease_until < now()),
        jsonb_build_object('owner', NULL, 'epoch', l.epoch + 1, 'lease_until', NULL,
                           'evicted_owner', l.owner, 'evicted_until', until, 'sends_in_flight', busy));
    RETURN QUERY SELECT 'done'::text,
        format('lease of guid %s released (was held by %s, epoch %s; now epoch %s). The holder is fenced: '
               'its renewal and its next send are refused, and it may not take the guid back before %s. '
               'Another sender may take it %s.',
               p_guid, l.owner, l.epoch, l.epoch + 1, until,
               CASE WHEN busy > 0 THEN format('once the %s send(s) it has in flight settle', busy) ELSE 'now' END),
        l.owner, l.epoch + 1, until, busy;
END
$fn$;
