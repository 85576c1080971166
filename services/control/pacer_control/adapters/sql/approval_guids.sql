-- A job's items per guid with the guid's current minimum interval between sends (its own
-- override, else the override for every guid, else NULL: the senders' default).
SELECT s.guid, sum(s.total)::bigint AS items,
       COALESCE((gl.limits ->> 'min_interval_s')::float8, (star.limits ->> 'min_interval_s')::float8) AS interval_s
FROM shards s
LEFT JOIN guid_limits gl ON gl.guid = s.guid
LEFT JOIN guid_limits star ON star.guid = '*'
WHERE s.job_id = %(job)s::uuid
GROUP BY s.guid, gl.limits, star.limits
ORDER BY items DESC, s.guid
