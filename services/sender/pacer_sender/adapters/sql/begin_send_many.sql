SELECT ord, outcome, epoch, attempts, holder, quiet_s
FROM pacer_begin_send_many(%(items)b::uuid[], %(owner)s, %(ttl)s::interval, %(keys)b::text[], %(guids)b::text[],
                           %(to_ids)b::text[])
