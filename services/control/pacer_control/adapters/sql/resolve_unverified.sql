SELECT outcome, message, status
FROM pacer_resolve_unverified(%(item)s::uuid, %(delivered)s, %(actor)s, %(reason)s)
