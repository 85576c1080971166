-- The guids an operator paused. With guid_states_held (0024: a state other than online) they
-- are the guids that hold their queue: the console's and the API's "only paused or not
-- online" list reads these two small indexes instead of every guid (guids.sql).
CREATE INDEX guid_leases_paused ON guid_leases (guid) WHERE paused_reason IS NOT NULL;
