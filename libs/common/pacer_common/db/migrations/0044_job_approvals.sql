-- Which jobs an admin has approved, on the job's own row: pacer_decide_approval sets them when
-- it approves. A requery job is asked for approval when the items its pages have brought pass
-- PACER_PLANNER_APPROVAL_ABOVE_ITEMS (pacer_await_approval, in the page's transaction), and
-- only once: a job with approved_at set is never asked again. The row, not the audit log,
-- answers, because the page's transaction holds the row already and the log is history kept
-- for people (pruned by time, partitioned apart from the job).
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS approved_at timestamptz;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS approved_by text;

-- Jobs approved before this migration: from their audit record.
UPDATE jobs j SET approved_at = a.at, approved_by = a.actor
FROM audit_log a
WHERE a.action = 'approve' AND a.target_type = 'job' AND a.target_id = j.job_id::text
  AND j.approved_at IS NULL;

-- pacer_await_approval: db/schema/functions/pacer_await_approval.sql
