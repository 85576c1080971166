-- Guids by lifecycle state (every state, 0 included), for pacer_reconciler_guids_by_state.
SELECT s.state::text AS state, count(g.guid) AS n
FROM unnest(enum_range(NULL::guid_state)) AS s(state)
LEFT JOIN guid_states g ON g.state = s.state
GROUP BY s.state
