SELECT guid, owner, epoch, lease_until FROM guid_leases WHERE guid = %(guid)s FOR UPDATE
