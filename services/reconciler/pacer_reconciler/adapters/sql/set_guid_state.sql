-- One lifecycle event of a guid, applied only if newer than the newest applied (pacer_set_guid_state).
SELECT changed, previous::text AS previous, state::text AS state
FROM pacer_set_guid_state(%(guid)s, %(state)s::guid_state, %(source)s, %(reason)s, %(ts)s)
