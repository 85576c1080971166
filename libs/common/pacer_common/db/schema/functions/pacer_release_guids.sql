-- Give up the leases of these guids that ``p_owner`` holds; returns how many.
--
-- Rows are locked in guid order, as pacer_acquire_guids, the renewal (renew_guids.sql) and the
-- batched steps lock them: an UPDATE by "guid = ANY(...)" alone locks in the order of its scan,
-- which is the heap's when the planner takes a sequential or bitmap scan for a long list (an
-- idle sender giving back hundreds of guids), and then deadlocked against the renewal of the
-- same sender's leases.
CREATE OR REPLACE FUNCTION pacer_release_guids(p_guids text[], p_owner text)
RETURNS integer
LANGUAGE sql AS $fn$
    WITH mine AS (
        SELECT l.guid FROM guid_leases l
        WHERE l.guid = ANY(p_guids) AND l.owner = p_owner
        ORDER BY l.guid
        FOR UPDATE
    ), released AS (
        UPDATE guid_leases g SET owner = NULL, lease_until = NULL
        FROM mine
        WHERE g.guid = mine.guid
        RETURNING 1
    )
    SELECT count(*)::integer FROM released;
$fn$;
