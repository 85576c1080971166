-- Give up the leases of these guids that ``p_owner`` holds; returns how many.
CREATE OR REPLACE FUNCTION pacer_release_guids(p_guids text[], p_owner text)
RETURNS integer
LANGUAGE sql AS $fn$
    WITH released AS (
        UPDATE guid_leases SET owner = NULL, lease_until = NULL
        WHERE guid = ANY(p_guids) AND owner = p_owner
        RETURNING 1
    )
    SELECT count(*)::integer FROM released;
$fn$;
