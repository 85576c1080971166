-- A shard out of paused: a release request for its held items.
CREATE OR REPLACE TRIGGER shards_hold_lifted AFTER UPDATE OF status ON shards
FOR EACH ROW WHEN (OLD.status = 'paused' AND NEW.status <> 'paused')
EXECUTE FUNCTION pacer_request_release('shard');
