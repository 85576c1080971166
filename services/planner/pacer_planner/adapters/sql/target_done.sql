-- The set is complete: a running job with nothing open is completed now (the reconciler
-- only looks at jobs whose items move, and the last pages may have added nothing).
UPDATE jobs j SET status = 'completed', finished_at = now()
WHERE j.job_id = %(job_id)s AND j.status = 'running' AND j.target_complete_at IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM items i WHERE i.job_id = j.job_id
                    AND i.status IN ('pending', 'claimed', 'submitted', 'waiting_retry', 'recovery_pending'))
