-- A guid's lifecycle changes, newest first (keyset on id).
SELECT id, state::text AS state, previous::text AS previous, at, event_ts, source, reason
FROM guid_state_history
WHERE guid = %(guid)s AND (%(before)s::bigint IS NULL OR id < %(before)s::bigint)
ORDER BY id DESC
LIMIT %(limit)s
