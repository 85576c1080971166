-- A guid's lifecycle state learned from a refused call that was not a send (a media upload),
-- dated when the call began (see pacer_settle: a callback dated after it is newer news).
SELECT changed FROM pacer_set_guid_state(%(guid)s, %(state)s::guid_state, 'send_failure', %(reason)s, %(at)s)
