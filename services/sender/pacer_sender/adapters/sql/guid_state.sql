-- A guid's lifecycle state learned from a refused call that was not a send (a media upload).
SELECT changed FROM pacer_set_guid_state(%(guid)s, %(state)s::guid_state, 'send_failure', %(reason)s, clock_timestamp())
