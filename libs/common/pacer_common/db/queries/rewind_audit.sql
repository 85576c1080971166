-- The audit record of a whole `pacer rewind-groups`: the restore point and each group's
-- offsets before and after. `pacer after-restore --to` the same point looks for it
-- (rewind_recorded.sql).
SELECT pacer_audit('cli', 'rewind_groups', 'consumer_groups', %(prefix)s::text, 'to ' || %(to)s::text,
                   NULL, %(after)s::jsonb)
