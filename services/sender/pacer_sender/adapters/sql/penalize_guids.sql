-- Record guids' rate-limit penalties (NULL: none left), each only while the lease row is still
-- at the epoch the sender held when the penalty changed: a release keeps the epoch, so a
-- penalty reaches the row after its guid was given back, but never once another sender took
-- it (or an admin forced it free). Rows are locked in guid order, as the renewal locks them.
WITH given AS (
    SELECT p.guid, p.epoch, p.penalty
    FROM unnest(%(guids)s::text[], %(epochs)s::bigint[], %(penalties)s::float8[]) AS p(guid, epoch, penalty)
), mine AS (
    SELECT l.guid, given.penalty FROM guid_leases l JOIN given ON given.guid = l.guid
    WHERE l.epoch = given.epoch
    ORDER BY l.guid
    FOR UPDATE OF l
)
UPDATE guid_leases g SET penalty = CASE WHEN mine.penalty > 1 THEN mine.penalty END
FROM mine
WHERE g.guid = mine.guid
