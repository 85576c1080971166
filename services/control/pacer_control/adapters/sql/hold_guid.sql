-- Pause a guid (audited by the database); false if it was already paused.
SELECT pacer_hold_guid(%(guid)s::text, %(reason)s::text, %(actor)s::text) AS held
