SELECT guid, sub, subs, shard_id FROM shards
WHERE job_id = %(job_id)s AND guid = ANY(%(guids)s::text[])
