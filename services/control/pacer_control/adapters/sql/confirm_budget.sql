-- A larger send budget; a job paused for its budget resumes. Audited by the database.
SELECT outcome, message, status FROM pacer_confirm_budget(%(job)s::uuid, %(max_sends)s::bigint, %(actor)s::text)
