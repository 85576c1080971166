-- A manual retry of one item: pacer_retry_items for that item alone (the answers are listed
-- in pacer_compensate.sql).
CREATE OR REPLACE FUNCTION pacer_retry_item(p_item uuid, p_actor text, p_priority smallint DEFAULT NULL)
RETURNS TABLE (outcome text, new_item uuid, message text)
LANGUAGE plpgsql AS $fn$
BEGIN
    RETURN QUERY SELECT r.outcome, r.new_item, r.message FROM pacer_retry_items(ARRAY[p_item], p_actor, p_priority) AS r;
END
$fn$;
