-- Days of per-tenant send counts past their retention (each tenant's local date, as the senders
-- count them; a day either way of UTC's is nothing against a retention of months).
-- A handful of rows a day (one per tenant), so a plain DELETE.
WITH gone AS (
    DELETE FROM tenant_usage
    WHERE day < (now() AT TIME ZONE 'UTC')::date - %(retain_days)s::int
    RETURNING 1
)
SELECT count(*) AS pruned FROM gone
