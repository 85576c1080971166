-- The jobs awaiting an admin's approval, oldest first (they wait in the order they came), and
-- how many wait in all.
SELECT job_id::text AS job_id, count(*) OVER () AS waiting
FROM jobs
WHERE status = 'awaiting_approval'
ORDER BY created_at, job_id
LIMIT %(limit)s
