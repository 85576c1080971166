SELECT ord, moved
FROM pacer_confirm_many(%(items)b::uuid[], %(epochs)b::bigint[], %(keys)b::text[], %(receipts)b::jsonb[])
