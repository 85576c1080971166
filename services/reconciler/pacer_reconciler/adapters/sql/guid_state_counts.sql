-- Guids by lifecycle state (every state, 0 included), for pacer_reconciler_guids_by_state, and
-- those of them with queued items (pending or waiting to retry), for
-- pacer_reconciler_held_guids_with_work: a switched-off phone with nothing to send holds nothing.
SELECT s.state::text AS state, count(g.guid) AS n,
       count(g.guid) FILTER (WHERE EXISTS (
           SELECT 1 FROM items i WHERE i.guid = g.guid AND i.status IN ('pending', 'waiting_retry'))) AS with_work
FROM unnest(enum_range(NULL::guid_state)) AS s(state)
LEFT JOIN guid_states g ON g.state = s.state
GROUP BY s.state
