-- Commands of a stored job's pending items, to re-dispatch a job whose commands may not have
-- gone out: a page of ``limit`` by item id after ``after`` (the last of the page before; NULL:
-- from the first). Read along the primary key within the millisecond of the job's creation,
-- which stamps the ids of every item the planner gives the job (new_item_ids; a retry's
-- compensation too): each page reads its own rows, not every pending item of the job again.
SELECT c.*
FROM jobs j
JOIN items i ON i.job_id = j.job_id
            AND i.item_id >= pacer_uuid7_floor(j.created_at)
            AND i.item_id < pacer_uuid7_floor(j.created_at + interval '1 millisecond')
CROSS JOIN LATERAL pacer_item_command(i) c
WHERE j.job_id = %(job_id)s::uuid AND i.status = 'pending'
  AND (%(after)s::uuid IS NULL OR i.item_id > %(after)s::uuid)
ORDER BY i.item_id
LIMIT %(limit)s
