-- Supersede older status versions of the same ticket (or this job, if a newer one exists).
SELECT pacer_coalesce(%(job_id)s) AS superseded
