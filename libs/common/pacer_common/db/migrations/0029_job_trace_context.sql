-- The W3C trace context (traceparent) of the job request, on the job: the reconciler puts it
-- on each of the job's outcomes (with the job's tenant), and reads both once per job instead of
-- once per event. Every item the planner stores carries its job's request trace (items.traceparent,
-- migration 0020), so a job stored before this version takes it from one of its planned items;
-- a compensation (retry) item, which carries none, is passed over.
ALTER TABLE jobs ADD COLUMN traceparent text;

UPDATE jobs j
SET traceparent = t.traceparent
FROM (SELECT j2.job_id,
             (SELECT i.traceparent FROM items i
              WHERE i.job_id = j2.job_id AND i.compensates IS NULL LIMIT 1) AS traceparent
      FROM jobs j2) t
WHERE t.job_id = j.job_id AND t.traceparent IS NOT NULL;
