-- Admission control counts each guid's queued items before accepting more work.
CREATE INDEX items_guid_queued ON items (guid) WHERE status IN ('pending', 'waiting_retry');
