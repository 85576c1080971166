SELECT outcome, message FROM pacer_resume_guid(%(guid)s::text, %(actor)s::text, %(reason)s::text)
