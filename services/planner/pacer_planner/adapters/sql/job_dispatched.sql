SELECT dispatched_at FROM jobs WHERE request_id = %(request_id)s
