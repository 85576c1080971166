-- Guids by lifecycle state (every state, 0 included), for pacer_reconciler_guids_by_state, and,
-- for each state but online, those of them with queued items (pending or waiting to retry), for
-- pacer_reconciler_held_guids_with_work: a switched-off phone with nothing to send holds nothing.
-- Only the guids not online (guid_states_held; a few of a fleet) are looked up in the items, each
-- through every items partition: the online ones are only counted (with_work NULL).
WITH held AS (
    SELECT g.state, count(*) AS n,
           count(*) FILTER (WHERE EXISTS (
               SELECT 1 FROM items i WHERE i.guid = g.guid AND i.status IN ('pending', 'waiting_retry'))) AS with_work
    FROM guid_states g
    WHERE g.state <> 'online'
    GROUP BY g.state
)
SELECT s.state::text AS state,
       CASE WHEN s.state = 'online' THEN (SELECT count(*) FROM guid_states g WHERE g.state = 'online')
            ELSE COALESCE(h.n, 0) END AS n,
       CASE WHEN s.state <> 'online' THEN COALESCE(h.with_work, 0) END AS with_work
FROM unnest(enum_range(NULL::guid_state)) AS s(state)
LEFT JOIN held h ON h.state = s.state
