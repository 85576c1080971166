SELECT paused_reason, paused_by, paused_at FROM guid_leases WHERE guid = %(guid)s
