-- A new item id stamped with p_at, its job's creation time: a version 7 UUID (48 bits of Unix
-- milliseconds, then random), as pacer_common.domain.ids.new_item_ids makes them. A job's
-- items all fall in the time partition of the job's day.
CREATE OR REPLACE FUNCTION pacer_item_id(p_at timestamptz) RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $fn$
    SELECT (lpad(to_hex(floor(extract(epoch FROM p_at) * 1000)::bigint), 12, '0') || '7'
            || substr(replace(gen_random_uuid()::text, '-', ''), 14))::uuid
$fn$;
