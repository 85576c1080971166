-- Refuse a time zone the database does not know (pacer_check_limits_timezone).
CREATE OR REPLACE TRIGGER guid_limits_timezone BEFORE INSERT OR UPDATE OF limits ON guid_limits
FOR EACH ROW EXECUTE FUNCTION pacer_check_limits_timezone();
