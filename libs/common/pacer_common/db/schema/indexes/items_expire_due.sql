-- The queued items that have an expire_at, by it: the reconciler's expire_due sweep reads the
-- ones past it, soonest expired first, and stops at its batch (due_expire_due.sql). Without
-- it the sweep would read every queued item of every partition on each round; it waits for
-- this index to be valid instead (built online: pacer_common.db.online_indexes).
CREATE INDEX items_expire_due ON items (expire_at)
    WHERE status IN ('pending', 'waiting_retry') AND expire_at IS NOT NULL;
