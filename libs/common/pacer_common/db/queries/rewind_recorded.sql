-- Whether `pacer rewind-groups --to` this restore point ran against this database for these
-- topics (rewind_audit.sql): a restored database holds no such record unless it was made
-- after the restore. Read by the audit log's target index.
SELECT EXISTS (
    SELECT 1 FROM audit_log
    WHERE target_type = 'consumer_groups' AND target_id = %(prefix)s::text AND action = 'rewind_groups'
      AND (after ->> 'to')::timestamptz = %(to)s::timestamptz
)
