-- A guid's ready work in the order it is sent: by priority, then job (fair share is taken
-- across the jobs of one priority), then the moment each item became ready (its not_before,
-- else its creation). Only claimable rows: pending and not held. The sender's refill
-- (next_ready.sql) reads it with a loose scan over (priority, job) and a short range per
-- pair, so a refill costs a few index probes per job of the guid whatever the backlog's
-- depth; a scheduled item sorts after every ready one of its job, so a range scan stops
-- at the first item not yet due (next_due is the same probe the other way).
CREATE INDEX items_guid_ready ON items (guid, priority, job_id, (COALESCE(not_before, created_at)), item_id)
    WHERE status = 'pending' AND NOT held;
