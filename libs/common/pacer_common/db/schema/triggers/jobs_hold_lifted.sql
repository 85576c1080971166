-- A job back to running: a release request for its held items.
CREATE OR REPLACE TRIGGER jobs_hold_lifted AFTER UPDATE OF status ON jobs
FOR EACH ROW WHEN (OLD.status <> 'running' AND NEW.status = 'running')
EXECUTE FUNCTION pacer_request_release('job');
