-- When the gateway last answered a send of the guid (set where a send is settled): the pace a
-- successor owner keeps runs from here, not from when the send began.
ALTER TABLE guid_leases ADD COLUMN last_answer_at timestamptz;
