-- Every tenant, secrets included (for the senders' gateway clients and the intake's
-- signature checks; never for an API answer).
SELECT name, base_url, credential, callback_secret, sends_per_day, max_guids FROM tenants ORDER BY name
