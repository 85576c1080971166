-- The lowest version 7 UUID of the millisecond of p_at: the bound, in item ids, of a time
-- partition of items, item_events and send_ledger (every id stamped at p_at or later sorts at
-- or after it).
CREATE OR REPLACE FUNCTION pacer_uuid7_floor(p_at timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT (lpad(to_hex(floor(extract(epoch FROM p_at) * 1000)::bigint), 12, '0') || repeat('0', 20))::uuid
$fn$;
