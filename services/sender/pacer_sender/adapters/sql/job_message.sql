-- A job's message (the same for all its items; a media job's items are sent by mediaId).
SELECT message FROM jobs WHERE job_id = %(job)s::uuid
