-- A guid's send counts per minute / hour / day window, kept beside its last send time so
-- that a handover keeps the window limits as well as the spacing.
-- windows = {"minute": [window index, sends], "hour": [...], "day": [...]}, where the index
-- is floor(epoch seconds / window size) — the senders' own windowing.
CREATE OR REPLACE FUNCTION pacer_count_send_windows() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    e double precision := extract(epoch FROM NEW.last_send_at);
    w jsonb := COALESCE(OLD.windows, '{}');
    r record;
    idx bigint;
BEGIN
    IF NEW.last_send_at IS NULL OR NEW.last_send_at IS NOT DISTINCT FROM OLD.last_send_at THEN
        RETURN NEW;
    END IF;
    FOR r IN SELECT * FROM (VALUES ('minute', 60), ('hour', 3600), ('day', 86400)) AS v(name, size) LOOP
        idx := floor(e / r.size);
        w := jsonb_set(w, ARRAY[r.name], jsonb_build_array(idx,
                 CASE WHEN (w -> r.name ->> 0)::bigint = idx THEN (w -> r.name ->> 1)::bigint + 1 ELSE 1 END));
    END LOOP;
    NEW.windows := w;
    RETURN NEW;
END
$fn$;
