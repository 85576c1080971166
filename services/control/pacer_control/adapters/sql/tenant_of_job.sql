SELECT tenant FROM jobs WHERE job_id = %(id)s::uuid
