-- pause / resume / cancel / terminate, decided and audited by the database (0008_governance.sql).
SELECT outcome, message, status FROM pacer_job_action(%(job)s::uuid, %(action)s::text, %(actor)s::text, %(reason)s::text)
