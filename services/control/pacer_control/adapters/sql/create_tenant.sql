-- A new tenant; no row if the name is taken.
INSERT INTO tenants (name, base_url, credential, callback_secret, sends_per_day, max_guids, timezone)
VALUES (%(name)s, %(base_url)s, %(credential)s, %(callback_secret)s, %(sends_per_day)s, %(max_guids)s, %(timezone)s)
ON CONFLICT (name) DO NOTHING
RETURNING name
