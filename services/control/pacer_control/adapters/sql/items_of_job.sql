SELECT item_id::text AS item_id FROM items WHERE job_id = %(job)s::uuid AND item_id = ANY(%(ids)s::uuid[])
