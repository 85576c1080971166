-- The item's id is stamped with now(), the time of this transaction, which pacer_test_send
-- gives the job as its created_at: an item id carries its job's creation time, as the
-- planner's and pacer_compensate's do (docs/architecture.md, "Item ids carry their job's
-- time"), so the item falls in the partition of its job's day, and in its job's range of ids.
SELECT job_id::text AS job_id, item_id::text AS item_id, idem_key
FROM pacer_test_send(%(job)s::uuid, pacer_item_id(now()), %(guid)s, %(to_id)s, %(content)s, %(actor)s)
