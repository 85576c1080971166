-- Commands of the still pending items of pages whose commands may not have gone out.
SELECT c.*
FROM items i CROSS JOIN LATERAL pacer_item_command(i) c
WHERE i.job_id = %(job_id)s AND i.target_page = ANY(%(pages)s::int[]) AND i.status = 'pending'
ORDER BY i.target_page, i.shard_id
