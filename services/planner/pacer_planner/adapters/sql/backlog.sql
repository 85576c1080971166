SELECT guid, count(*) AS queued
FROM items
WHERE guid = ANY(%(guids)s::text[]) AND status IN ('pending', 'waiting_retry')
GROUP BY guid
