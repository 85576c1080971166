-- Jobs, newest first, with items per status (the reconciler's projection, summed over shards); those of
-- ``ids`` only, if given; the one planned from ``request_id``, if given.
SELECT j.job_id::text AS job_id, j.request_id, j.kind, j.priority, j.status, j.paused_reason, j.target_mode,
       j.created_by, j.created_at, j.total, j.tenant, COALESCE(c.counts, '{}'::jsonb) AS counts
FROM jobs j
LEFT JOIN LATERAL (
    SELECT jsonb_object_agg(x.status, x.n) AS counts
    FROM (SELECT sc.status::text AS status, sum(sc.n)::bigint AS n
          FROM shards s JOIN shard_status_counts sc ON sc.shard_id = s.shard_id
          WHERE s.job_id = j.job_id
          GROUP BY sc.status
          HAVING sum(sc.n) <> 0) AS x
) AS c ON true
WHERE (%(status)s::text IS NULL OR j.status = %(status)s::text)
  AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
  AND (%(created_by)s::text IS NULL OR j.created_by = %(created_by)s::text)
  AND (%(tenants)s::text[] IS NULL OR j.tenant = ANY(%(tenants)s::text[]))
  AND (%(ids)s::uuid[] IS NULL OR j.job_id = ANY(%(ids)s::uuid[]))
  AND (%(request_id)s::text IS NULL OR j.request_id = %(request_id)s::text)
  AND (%(since)s::timestamptz IS NULL OR j.created_at >= %(since)s::timestamptz)
  AND (%(before)s::uuid IS NULL
       OR (j.created_at, j.job_id) < (SELECT b.created_at, b.job_id FROM jobs b WHERE b.job_id = %(before)s::uuid))
ORDER BY j.created_at DESC, j.job_id DESC
LIMIT %(limit)s
