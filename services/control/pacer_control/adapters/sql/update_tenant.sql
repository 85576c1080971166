-- Change the fields named in %(fields)s (others unchanged; NULL clears); no row if there is no such tenant.
UPDATE tenants SET
    base_url = CASE WHEN 'base_url' = ANY(%(fields)s::text[]) THEN %(base_url)s ELSE base_url END,
    credential = CASE WHEN 'credential' = ANY(%(fields)s::text[]) THEN %(credential)s ELSE credential END,
    callback_secret = CASE WHEN 'callback_secret' = ANY(%(fields)s::text[]) THEN %(callback_secret)s
                           ELSE callback_secret END,
    sends_per_day = CASE WHEN 'sends_per_day' = ANY(%(fields)s::text[]) THEN %(sends_per_day)s::int
                         ELSE sends_per_day END,
    max_guids = CASE WHEN 'max_guids' = ANY(%(fields)s::text[]) THEN %(max_guids)s::int ELSE max_guids END,
    timezone = CASE WHEN 'timezone' = ANY(%(fields)s::text[]) THEN %(timezone)s::text ELSE timezone END,
    updated_at = now()
WHERE name = %(name)s
RETURNING name
