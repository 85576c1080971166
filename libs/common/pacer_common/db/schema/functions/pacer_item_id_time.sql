-- The time an item id carries, to the millisecond: its first 48 bits (a version 7 UUID, as
-- pacer_item_id and the planner make them). The inverse of pacer_uuid7_floor, so it reads a
-- time partition's item id bounds back as the times they were made from.
CREATE OR REPLACE FUNCTION pacer_item_id_time(p_id uuid) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT to_timestamp(('x' || replace(left(p_id::text, 13), '-', ''))::bit(48)::bigint / 1000.0)
$fn$;
