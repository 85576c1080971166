SELECT 1 FROM jobs WHERE request_id = %(request_id)s
