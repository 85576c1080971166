-- Record guids' rate-limit penalties (NULL: none left) and the quiet a gateway asked of each
-- (the seconds of it left at the write, counted on Postgres' clock so that no sender's clock
-- moves it; NULL: none, or over), each only while the lease row is still at the epoch the
-- sender held when they changed: a release keeps the epoch, so they reach the row after the
-- guid was given back, but never once another sender took it (or an admin forced it free).
-- Rows are locked in guid order, as the renewal locks them.
WITH given AS (
    SELECT p.guid, p.epoch, p.penalty, p.quiet_s
    FROM unnest(%(guids)s::text[], %(epochs)s::bigint[], %(penalties)s::float8[], %(quiet_s)s::float8[])
         AS p(guid, epoch, penalty, quiet_s)
), mine AS (
    SELECT l.guid, given.penalty, given.quiet_s FROM guid_leases l JOIN given ON given.guid = l.guid
    WHERE l.epoch = given.epoch
    ORDER BY l.guid
    FOR UPDATE OF l
)
UPDATE guid_leases g SET penalty = CASE WHEN mine.penalty > 1 THEN mine.penalty END,
                         gateway_quiet_until = CASE WHEN mine.quiet_s > 0
                                                    THEN now() + make_interval(secs => mine.quiet_s) END
FROM mine
WHERE g.guid = mine.guid
