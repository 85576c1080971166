-- Refuse a tenant's time zone the database does not know (pacer_check_tenant_timezone).
CREATE OR REPLACE TRIGGER tenants_timezone BEFORE INSERT OR UPDATE OF timezone ON tenants
FOR EACH ROW EXECUTE FUNCTION pacer_check_tenant_timezone();
