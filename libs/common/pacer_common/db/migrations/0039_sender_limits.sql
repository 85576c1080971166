-- Each sender's own pacing defaults (its PACER_SENDER_* limits), the layer under every guid's
-- `*` override. The stall count and the Control API read a guid's limits as the sender
-- holding its lease (guid_leases.owner) applies them: quiet hours or a per-day cap set only
-- in a sender's environment hold its guids there too. A sender writes its row at start and
-- again every few minutes (seen_at); the reconcilers' maintenance deletes rows not seen for a
-- day.
CREATE TABLE IF NOT EXISTS sender_limits (
    owner   text PRIMARY KEY,
    limits  jsonb NOT NULL,
    seen_at timestamptz NOT NULL DEFAULT now()
);

-- A guid's day is counted in its time zone (trigger guid_send_windows), and a name this
-- server does not know would fail its sends there. New names are checked as they are written
-- (trigger guid_limits_timezone); those written before, checked by the senders' zoneinfo
-- alone, are checked here. Migrating stops, naming them, until they are changed
-- (`pacer limits GUID --set timezone=Asia/Shanghai`).
DO $check$
DECLARE
    unknown text;
BEGIN
    SELECT string_agg(format('%s (%s)', gl.guid, gl.limits ->> 'timezone'), ', ' ORDER BY gl.guid) INTO unknown
    FROM guid_limits gl
    WHERE gl.limits ? 'timezone'
      AND NOT EXISTS (SELECT 1 FROM pg_timezone_names z WHERE z.name = gl.limits ->> 'timezone');
    IF unknown IS NOT NULL THEN
        RAISE EXCEPTION 'guid_limits names time zones this database does not know: %', unknown
            USING HINT = 'set each to an IANA name it knows (pacer limits GUID --set timezone=Asia/Shanghai), then migrate again';
    END IF;
END
$check$;
