-- Paging gave up (fetches kept failing, or a page cannot be stored): pause the job, audited.
SELECT pacer_hold_job(%(job_id)s, %(reason)s, 'system:planner') AS held
