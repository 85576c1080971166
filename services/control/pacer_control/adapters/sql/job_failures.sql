-- Why a job's items did not (yet) go out: error class × status, for the statuses given.
SELECT last_error_class AS error_class, status::text AS status, count(*) AS n
FROM items
WHERE job_id = %(job)s::uuid AND status = ANY(%(statuses)s::item_status[]) AND last_error_class IS NOT NULL
GROUP BY last_error_class, status
