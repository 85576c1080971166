-- A requery job is not complete before its target set is, nor while items are open. The
-- reconciler completes a job whose shards are all completed, and resume completes a job
-- with nothing open; either could happen between two pages. This guard turns such a
-- completion back into 'running'. Its query runs with a fresh snapshot after the job row
-- lock is granted, and the planner holds that lock while it stores a page, so a completion
-- racing a page always sees the page's items.
CREATE OR REPLACE FUNCTION pacer_guard_requery_completion()
RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    IF NEW.target_mode = 'requery' AND (NEW.target_complete_at IS NULL OR EXISTS (
            SELECT 1 FROM items i
            WHERE i.job_id = NEW.job_id
              AND i.status IN ('pending', 'claimed', 'submitted', 'waiting_retry', 'recovery_pending'))) THEN
        NEW.status := 'running';
        NEW.finished_at := NULL;
    END IF;
    RETURN NEW;
END
$fn$;
