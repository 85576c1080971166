SELECT j.tenant FROM items i JOIN jobs j ON j.job_id = i.job_id WHERE i.item_id = %(id)s::uuid
