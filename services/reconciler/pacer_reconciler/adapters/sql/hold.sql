-- Pause a running job or an open guid, with the reason and an audit record (no-op if already).
SELECT CASE %(scope)s::text
         WHEN 'job' THEN pacer_hold_job(%(key)s::text::uuid, %(reason)s::text, %(actor)s::text)
         WHEN 'guid' THEN pacer_hold_guid(%(key)s::text, %(reason)s::text, %(actor)s::text)
       END AS held
