-- Give up the leases of these guids that ``p_owner`` holds; returns how many. Durable in
-- one statement (pacer_synchronous_commit).
CREATE OR REPLACE FUNCTION pacer_release_guids(p_guids text[], p_owner text)
RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
    n integer;
BEGIN
    PERFORM pacer_synchronous_commit();
    UPDATE guid_leases SET owner = NULL, lease_until = NULL
    WHERE guid = ANY(p_guids) AND owner = p_owner;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$fn$;
