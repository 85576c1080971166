-- A job's items per status (the reconciler's projection, summed over its shards) and its
-- shards per status: one aggregate each, whatever the number of shards.
SELECT COALESCE((SELECT jsonb_object_agg(x.status, x.n)
                 FROM (SELECT sc.status::text AS status, sum(sc.n)::bigint AS n
                       FROM shards s JOIN shard_status_counts sc ON sc.shard_id = s.shard_id
                       WHERE s.job_id = %(job)s::uuid
                       GROUP BY sc.status
                       HAVING sum(sc.n) <> 0) AS x), '{}'::jsonb) AS counts,
       COALESCE((SELECT jsonb_object_agg(y.status, y.n)
                 FROM (SELECT s.status, count(*) AS n FROM shards s WHERE s.job_id = %(job)s::uuid
                       GROUP BY s.status) AS y), '{}'::jsonb) AS shard_statuses
