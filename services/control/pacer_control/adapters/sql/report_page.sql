-- One page of the delivery report (columns: domain/report.py COLUMNS): the job's items after
-- ``after`` (NULL: from the first) by item id. The item id is the primary key, unique and never
-- changed, so consecutive pages neither skip nor repeat an item, whatever else they share.
-- ``first`` and ``last`` are the job's range of ids (item_span.sql). A job's item ids
-- start with its creation time, so in that range of the primary key its items are all or
-- nearly all there is: a large job's page walks the key from ``after`` and stops at its limit;
-- without the bounds, the first page would walk the ids of every job created before it in the
-- partition and the last those of every job after it. A small job's page is read through
-- items_job_status and sorted (the planner's choice, by the job's share of the range).
-- Ordered by the uuid column, as in the WHERE (not the text alias).
SELECT i.item_id::text, i.guid, i.to_id, i.status::text, i.attempts, i.last_error_class, i.last_error, i.updated_at
FROM items i
WHERE i.job_id = %(job)s::uuid
  AND i.item_id BETWEEN %(first)s::uuid AND %(last)s::uuid
  AND (%(after)s::uuid IS NULL OR i.item_id > %(after)s::uuid)
ORDER BY i.item_id
LIMIT %(limit)s
