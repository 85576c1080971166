SELECT pacer_audit(%(actor)s::text, %(action)s::text, %(type)s::text, %(id)s::text, %(reason)s::text,
                   %(before)s::jsonb, %(after)s::jsonb)
