SELECT ord, outcome, epoch, attempts, holder
FROM pacer_begin_send_many(%(items)s::uuid[], %(owner)s, %(ttl)s::interval, %(keys)s::text[], %(guids)s::text[],
                           %(to_ids)s::text[])
