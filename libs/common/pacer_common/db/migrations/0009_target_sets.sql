-- Target sets. A 'requery' job's targets are fetched by the planner page by page from a URL;
-- each page is stored in one transaction (its items, new shards, totals, the cursor and a
-- row in job_target_pages), so paging resumes from the stored cursor after a crash. Shards
-- of very long guids are split into sub-shards by a hash of to_id (shards.sub of shards.subs).

-- The target set of a job: where paging stands, and what it found.
--   target_cursor       next_cursor of the last stored page (NULL before the first page)
--   target_pages        pages stored; the next page is number target_pages + 1
--   target_fetched      targets received, valid or not
--   target_duplicates   targets the job already had (the set changed while paging) or
--                       repeated within a page: skipped
--   target_invalid      targets skipped because they were not valid or could not be rendered
--   target_complete_at  when the last page (next_cursor null) was stored; set at creation
--                       for a snapshot
--   target_wait_reason  why paging is not moving right now (a fetch failing and being
--                       retried, a page waiting for admission); cleared by the next page
--   target_owner / target_lease_until
--                       the planner paging this job (a lease: a crashed planner's jobs are
--                       taken over once it runs out)
ALTER TABLE jobs
    ADD COLUMN target_cursor      text,
    ADD COLUMN target_pages       integer NOT NULL DEFAULT 0,
    ADD COLUMN target_fetched     bigint NOT NULL DEFAULT 0,
    ADD COLUMN target_duplicates  bigint NOT NULL DEFAULT 0,
    ADD COLUMN target_invalid     bigint NOT NULL DEFAULT 0,
    ADD COLUMN target_complete_at timestamptz,
    ADD COLUMN target_wait_reason text,
    ADD COLUMN target_owner       text,
    ADD COLUMN target_lease_until timestamptz;
ALTER TABLE jobs ADD CONSTRAINT jobs_target_mode_check CHECK (target_mode IN ('snapshot', 'requery'));
UPDATE jobs SET target_complete_at = created_at, target_fetched = total WHERE target_mode = 'snapshot';
-- The planner's sweep: requery jobs whose paging (or its last dispatch) is not finished.
CREATE INDEX jobs_requery_open ON jobs (created_at) WHERE target_mode = 'requery' AND dispatched_at IS NULL;

-- One row per stored page, written in the page's transaction. ``dispatched_at`` is set once
-- the page's item commands are flushed; a page without it is re-dispatched on resume.
CREATE TABLE job_target_pages (
    job_id        uuid NOT NULL REFERENCES jobs (job_id),
    page_no       integer NOT NULL CHECK (page_no > 0),
    cursor_in     text,
    cursor_out    text,
    fetched       integer NOT NULL,
    added         integer NOT NULL,
    duplicates    integer NOT NULL,
    invalid       integer NOT NULL,
    first_error   text,
    fetched_at    timestamptz NOT NULL,
    stored_at     timestamptz NOT NULL DEFAULT now(),
    dispatched_at timestamptz,
    PRIMARY KEY (job_id, page_no)
);

-- A guid's number of sub-shards in the job, the same on each of its shards. Fixed when its
-- first shard is created: from its item count (snapshot), or from its targets on the page
-- where it first appears (requery).
ALTER TABLE shards ADD COLUMN subs integer NOT NULL DEFAULT 1 CHECK (subs > 0);
ALTER TABLE shards ADD CONSTRAINT shards_sub_check CHECK (sub >= 0 AND sub < subs);

-- The page that brought a requery item (NULL for snapshot items and for compensations).
-- A requery job has each (guid, to_id) once: a target seen again on a later page, because
-- the set changed while paging or a page was fetched again, is skipped by this index.
-- Partial, so snapshot items (the bulk, COPY'd) pay nothing for it. Built by scanning
-- items: on a large table, run this migration in a quiet moment.
ALTER TABLE items ADD COLUMN target_page integer;
CREATE UNIQUE INDEX items_requery_target ON items (job_id, guid, to_id) WHERE target_page IS NOT NULL;

-- A requery job is not complete before its target set is, nor while items are open. The
-- reconciler completes a job whose shards are all completed, and resume completes a job
-- with nothing open; either could happen between two pages. This guard turns such a
-- completion back into 'running'. Its query runs with a fresh snapshot after the job row
-- lock is granted, and the planner holds that lock while it stores a page, so a completion
-- racing a page always sees the page's items.
CREATE FUNCTION pacer_guard_requery_completion()
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
CREATE TRIGGER jobs_requery_completion BEFORE UPDATE OF status ON jobs
FOR EACH ROW WHEN (NEW.status = 'completed') EXECUTE FUNCTION pacer_guard_requery_completion();
