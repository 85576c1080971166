-- Item leases of items in hand (claimed or submitted), expired ones first.
SELECT item_id::text AS item_id, guid, status::text AS status, lease_owner, lease_epoch, lease_until,
       (lease_until < now()) AS expired
FROM items
WHERE status IN ('claimed', 'submitted')
ORDER BY items.lease_until NULLS LAST, items.item_id
LIMIT %(limit)s
