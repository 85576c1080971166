-- Commands of the still pending items of pages whose commands may not have gone out.
SELECT i.item_id::text, i.job_id::text, i.shard_id, i.guid, i.to_id, i.content, i.idem_key,
       i.priority, i.kind, i.expire_at, i.not_before, i.created_at, i.traceparent
FROM items i
WHERE i.job_id = %(job_id)s AND i.target_page = ANY(%(pages)s::int[]) AND i.status = 'pending'
ORDER BY i.target_page, i.shard_id
