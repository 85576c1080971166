-- Keep our guid leases: only those whose owner AND epoch are still ours. A lease that was
-- force-released (new epoch, no owner) or taken by another sender is not taken back here;
-- the caller forgets it. Rows are locked in guid order, as pacer_acquire_guids locks them.
-- Each kept lease comes back with what is left of a quiet a gateway asked of its guid (0: none),
-- which another caller (the reconciler's lookups) may have written since the take.
WITH held AS (
    SELECT h.guid, h.epoch FROM unnest(%(guids)s::text[], %(epochs)s::bigint[]) AS h(guid, epoch)
), mine AS (
    SELECT l.guid FROM guid_leases l JOIN held ON held.guid = l.guid
    WHERE l.owner = %(owner)s AND l.epoch = held.epoch
    ORDER BY l.guid
    FOR UPDATE OF l
)
UPDATE guid_leases g SET lease_until = now() + %(ttl)s::interval, renew_count = g.renew_count + 1
FROM mine
WHERE g.guid = mine.guid
RETURNING g.guid, greatest(extract(epoch FROM g.gateway_quiet_until - now())::float8, 0) AS quiet_s
