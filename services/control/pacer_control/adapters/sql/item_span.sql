-- The range of item ids that holds a job's items: the bounds every page of them stays within
-- (items.sql, report_page.sql, select_for_retry.sql, select_for_cancel.sql). There is no
-- (job_id, item_id) index; items is partitioned, and its primary key ordered, by the item id,
-- whose first 48 bits are the creation time of the job (new_item_ids, pacer_item_id), so a
-- page keyed on the item id within this range reads its own job's rows and stops. Without the
-- range, the first page walked the ids of every job created before it in the partition, and
-- the last those of every job after it.
--
-- The range is the job's own item ids, first to last, read from its rows (every item of the
-- job, none of the jobs around it: cheap for a small job, a scan for a large one, so the
-- Control API reads it once a job and keeps it, core.Control._span), widened to the whole
-- millisecond of the job's creation: an item added to the job later (a retry's compensation, a
-- requery page) is stamped with that millisecond and so falls in it, and the range, once read,
-- holds every item the job will ever have.
-- Read from the rows too, not from created_at alone, because a row may carry another time: a
-- test send's item was once stamped with the Control API's clock, a little before its job's.
-- No row when there is no such job.
-- uuid has no min() or max(); its text sorts as the uuid does in the C collation (fixed-width
-- lowercase hex, the hyphens in the same places).
SELECT LEAST(d.first, pacer_uuid7_floor(j.created_at)::text) AS first,
       GREATEST(d.last, pacer_uuid7_floor(j.created_at + interval '1 millisecond')::text) AS last
FROM jobs j,
     (SELECT min(i.item_id::text COLLATE "C") AS first, max(i.item_id::text COLLATE "C") AS last
      FROM items i WHERE i.job_id = %(job)s::uuid) d
WHERE j.job_id = %(job)s::uuid
