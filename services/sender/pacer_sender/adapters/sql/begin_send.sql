SELECT outcome, epoch, attempts, holder
FROM pacer_begin_send(%(item_id)s, %(owner)s, %(ttl)s, %(idem_key)s, %(guid)s, %(to_id)s)
