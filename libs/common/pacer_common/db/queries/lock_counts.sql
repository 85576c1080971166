-- The lock dashboard's numbers: guid lease rows (every guid that ever held one) and those held,
-- running items, expired leases (guid + item), guid lease
-- takeovers, duplicate intercepts by the idempotency ledger (in the item events still kept:
-- retention drops their partitions, so a level, not a counter), refused manual retries, forced
-- releases of guid leases and of item leases (from the audit log).
SELECT
    (SELECT count(*) FROM guid_leases) AS guid_leases,
    (SELECT count(*) FROM guid_leases WHERE owner IS NOT NULL) AS guid_leases_held,
    (SELECT count(*) FROM items WHERE status IN ('claimed', 'submitted')) AS running_items,
    (SELECT count(*) FROM guid_leases WHERE owner IS NOT NULL AND lease_until < now())
      + (SELECT count(*) FROM items WHERE status IN ('claimed', 'submitted') AND lease_until < now())
      AS expired_leases,
    (SELECT COALESCE(sum(takeovers), 0)::bigint FROM guid_leases) AS takeovers,
    (SELECT count(*) FROM item_events WHERE type = 'ItemDuplicateIntercepted') AS duplicate_intercepts,
    (SELECT count(*) FROM operator_conflicts) AS retry_conflicts,
    (SELECT COALESCE(sum(forced_releases), 0)::bigint FROM guid_leases) AS forced_releases,
    (SELECT count(*) FROM audit_log WHERE action = 'release_lock' AND target_type = 'item') AS forced_item_releases
