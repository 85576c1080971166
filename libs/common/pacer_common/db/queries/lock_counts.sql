-- The lock dashboard's numbers: running items, expired leases (guid + item), guid lease
-- takeovers, duplicate intercepts by the idempotency ledger, refused manual retries.
SELECT
    (SELECT count(*) FROM items WHERE status IN ('claimed', 'submitted')) AS running_items,
    (SELECT count(*) FROM guid_leases WHERE owner IS NOT NULL AND lease_until < now())
      + (SELECT count(*) FROM items WHERE status IN ('claimed', 'submitted') AND lease_until < now())
      AS expired_leases,
    (SELECT COALESCE(sum(takeovers), 0)::bigint FROM guid_leases) AS takeovers,
    (SELECT count(*) FROM item_events WHERE type = 'ItemDuplicateIntercepted') AS duplicate_intercepts,
    (SELECT count(*) FROM operator_conflicts) AS retry_conflicts
