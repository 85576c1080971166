-- Seconds until the earliest scheduled (not_before) pending item of one guid comes due, by
-- the database's clock; NULL if it has none.
SELECT extract(epoch FROM min(not_before) - now())::float8 AS due_in_s
FROM items
WHERE guid = %(guid)s AND status = 'pending' AND NOT held AND not_before > now()
