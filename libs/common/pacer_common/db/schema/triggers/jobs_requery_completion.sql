-- A requery job is not completed before its target set is, nor while items are open.
CREATE OR REPLACE TRIGGER jobs_requery_completion BEFORE UPDATE OF status ON jobs
FOR EACH ROW WHEN (NEW.status = 'completed') EXECUTE FUNCTION pacer_guard_requery_completion();
