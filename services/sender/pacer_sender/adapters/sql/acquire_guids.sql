SELECT guid, epoch, last_send_at, took_over, db_now
FROM pacer_acquire_guids(%(guids)s::text[], %(owner)s, %(ttl)s::interval)
