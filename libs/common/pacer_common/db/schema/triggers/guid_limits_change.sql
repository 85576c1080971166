-- Stamp every guid_limits change with its transaction id (pacer_stamp_limits_change).
CREATE OR REPLACE TRIGGER guid_limits_change BEFORE INSERT OR UPDATE ON guid_limits
FOR EACH ROW EXECUTE FUNCTION pacer_stamp_limits_change();
