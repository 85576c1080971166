-- Commands of a stored job's pending items, to re-dispatch a job whose commands may not have gone out.
SELECT c.*
FROM items i CROSS JOIN LATERAL pacer_item_command(i) c
WHERE i.job_id = %(job_id)s AND i.status = 'pending'
ORDER BY i.shard_id, i.created_at
