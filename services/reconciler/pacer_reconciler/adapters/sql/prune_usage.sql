-- Days of per-tenant send counts past their retention (each tenant's local date, as the senders
-- count them; a day either way of UTC's is nothing against a retention of months), and the
-- last applied flush of each sender that has added none for as long (tenant_usage_flushes, one
-- row per sender process: a sender is new at each start, so such a row is a gone sender's; one
-- still running that adds sends again starts a new row, whose flush is applied).
-- A handful of rows a day (one per tenant, one per sender start), so a plain DELETE.
WITH gone AS (
    DELETE FROM tenant_usage
    WHERE day < (now() AT TIME ZONE 'UTC')::date - %(retain_days)s::int
    RETURNING 1
), gone_senders AS (
    DELETE FROM tenant_usage_flushes
    WHERE at < now() - make_interval(days => %(retain_days)s::int)
)
SELECT count(*) AS pruned FROM gone
