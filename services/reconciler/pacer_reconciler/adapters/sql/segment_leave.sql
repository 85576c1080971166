-- A replica stops cleanly: its membership goes, so peers count it out at once.
DELETE FROM leader_leases WHERE name = %(name)s
