SELECT ord, moved
FROM pacer_confirm_many(%(items)s::uuid[], %(epochs)s::bigint[], %(keys)s::text[], %(receipts)s::jsonb[])
