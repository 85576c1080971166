SELECT limits FROM guid_limits WHERE guid = %(guid)s
