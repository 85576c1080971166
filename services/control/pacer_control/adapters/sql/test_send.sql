SELECT job_id::text AS job_id, item_id::text AS item_id, idem_key
FROM pacer_test_send(%(job)s::uuid, %(item)s::uuid, %(guid)s, %(to_id)s, %(content)s, %(actor)s)
