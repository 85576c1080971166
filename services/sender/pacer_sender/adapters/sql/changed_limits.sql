SELECT guid, limits, updated_at FROM guid_limits WHERE updated_at > %(since)s ORDER BY updated_at
