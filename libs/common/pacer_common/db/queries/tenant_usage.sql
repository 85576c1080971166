-- Add one flush of a sender's sends per tenant to each tenant's today, then read every
-- tenant's today back: its date, the epoch second it ends, and its sends from all senders so
-- far (pacer_tenant_day: the tenant's time zone, else this sender's pacer.timezone).
-- %(tenants)s and %(sends)s are parallel arrays (possibly empty: then nothing is written).
--
-- Once only: the flush is (%(sender)s, %(seq)s), and it adds its sends only if its seq is past
-- the last one applied for that sender (tenant_usage_flushes), recorded in this statement. A
-- flush retried after its answer was lost adds nothing if it had committed, and adds once if
-- it had not. The sender's row is taken by ON CONFLICT before the sends are added: a retry that
-- overtakes its first attempt, still running on a connection the client gave up on, waits for
-- it and then sees its seq (its totals, read from this statement's earlier snapshot, may miss
-- that attempt's sends until the next round).
WITH today AS (
    SELECT t.name AS tenant, d.day, d.ends_at FROM tenants t CROSS JOIN LATERAL pacer_tenant_day(t.timezone) d
), applied AS (
    INSERT INTO tenant_usage_flushes AS f (sender, seq, at)
    SELECT %(sender)s, %(seq)s, now() WHERE cardinality(%(tenants)s::text[]) > 0
    ON CONFLICT (sender) DO UPDATE SET seq = EXCLUDED.seq, at = EXCLUDED.at WHERE f.seq < EXCLUDED.seq
    RETURNING f.seq
), added AS (
    INSERT INTO tenant_usage AS u (tenant, day, sends)
    SELECT x.t, d.day, x.n FROM unnest(%(tenants)s::text[], %(sends)s::bigint[]) AS x(t, n)
    JOIN today d ON d.tenant = x.t
    WHERE EXISTS (SELECT FROM applied)
    ON CONFLICT (tenant, day) DO UPDATE SET sends = u.sends + EXCLUDED.sends
    RETURNING u.tenant, u.sends
)
SELECT d.tenant, d.day, extract(epoch FROM d.ends_at)::float8 AS ends_at,
       COALESCE(a.sends, u.sends, 0) AS sends
FROM today d
LEFT JOIN added a ON a.tenant = d.tenant
LEFT JOIN tenant_usage u ON u.tenant = d.tenant AND u.day = d.day
ORDER BY d.tenant
