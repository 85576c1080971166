-- Record guids' rate-limit penalties (NULL: none left) and the quiet a gateway asked of each
-- (the seconds of it left at the write, counted on Postgres' clock so that no sender's clock
-- moves it; NULL: none, or over; a quiet on the row that ends later, which a lookup of the
-- reconciler's may have been given, is kept). A penalty is written only while the lease row is
-- still at the epoch the sender held when it changed: a release keeps the epoch, so it reaches
-- the row after the guid was given back, but never once another sender took it (or an admin
-- forced it free). A quiet is the gateway's, whoever holds the guid: written whatever the
-- epoch (the next take or renewal of its holder reads it).
-- Rows are locked in guid order, as the renewal locks them.
WITH given AS (
    SELECT p.guid, p.epoch, p.penalty, p.quiet_s
    FROM unnest(%(guids)s::text[], %(epochs)s::bigint[], %(penalties)s::float8[], %(quiet_s)s::float8[])
         AS p(guid, epoch, penalty, quiet_s)
), mine AS (
    SELECT l.guid, l.epoch = given.epoch AS held, given.penalty, given.quiet_s
    FROM guid_leases l JOIN given ON given.guid = l.guid
    WHERE l.epoch = given.epoch
       OR (given.quiet_s > 0 AND (l.gateway_quiet_until IS NULL
                                  OR l.gateway_quiet_until < now() + make_interval(secs => given.quiet_s)))
    ORDER BY l.guid
    FOR UPDATE OF l
)
UPDATE guid_leases g SET penalty = CASE WHEN NOT mine.held THEN g.penalty WHEN mine.penalty > 1 THEN mine.penalty END,
                         gateway_quiet_until = greatest(g.gateway_quiet_until,
                                                        CASE WHEN mine.quiet_s > 0
                                                             THEN now() + make_interval(secs => mine.quiet_s) END)
FROM mine
WHERE g.guid = mine.guid
