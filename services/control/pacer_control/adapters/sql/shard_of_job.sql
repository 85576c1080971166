-- Whether shard ``shard`` is one of job ``job``'s (a page of its shards starts after it).
SELECT 1 FROM shards WHERE shard_id = %(shard)s::bigint AND job_id = %(job)s::uuid
