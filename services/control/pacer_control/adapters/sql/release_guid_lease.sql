-- A forced release. The epoch is left as it is: the next pacer_acquire_guids bumps it, and
-- pacer_begin_send already refuses the old holder (it is no longer the owner).
UPDATE guid_leases SET owner = NULL, lease_until = NULL WHERE guid = %(guid)s
