-- The audit record of a whole `pacer after-restore`: how many items it put in doubt, by status.
SELECT pacer_audit(%(actor)s::text, 'after_restore', 'database', current_database()::text, %(reason)s::text,
                   NULL, %(after)s::jsonb)
