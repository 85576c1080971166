-- A guid's pause cleared: a release request for its held items.
CREATE OR REPLACE TRIGGER guids_hold_lifted AFTER UPDATE OF paused_reason ON guid_leases
FOR EACH ROW WHEN (OLD.paused_reason IS NOT NULL AND NEW.paused_reason IS NULL)
EXECUTE FUNCTION pacer_request_release('guid');
