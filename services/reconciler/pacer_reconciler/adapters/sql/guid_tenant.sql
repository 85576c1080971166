-- The tenant a guid belongs to: set by the first job that names it (none until then).
SELECT tenant FROM tenant_guids WHERE guid = %(guid)s
