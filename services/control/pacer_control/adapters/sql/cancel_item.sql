SELECT outcome, message FROM pacer_cancel_item(%(item)s::uuid, %(actor)s::text)
