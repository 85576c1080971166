-- Every guid's limits overrides (the `*` row, under each guid's own), and the database's time.
SELECT (SELECT limits FROM guid_limits WHERE guid = '*') AS limits, now() AS now
