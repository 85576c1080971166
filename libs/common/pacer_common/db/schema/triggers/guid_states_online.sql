-- A guid back online: a release request for its held items (as a lifted pause).
CREATE OR REPLACE TRIGGER guid_states_online AFTER UPDATE OF state ON guid_states
FOR EACH ROW WHEN (OLD.state <> 'online' AND NEW.state = 'online')
EXECUTE FUNCTION pacer_request_release('guid');
