-- A guid's day window is its calendar day in its time zone (trigger guid_send_windows), so a
-- time zone stored in guid_limits must be one this server knows: a name it did not know would
-- stop every send of the guid at the trigger. `pacer limits` and the Control API check names
-- against the IANA database first; this refuses, with the server's own words ("time zone ... not
-- recognized"), a name its copy lacks or a row written by hand. The counts already kept go on:
-- a day window written before holds [index, sends] of a UTC day and ends at its UTC midnight,
-- and the next send starts the guid's own day.
ALTER TABLE guid_limits ADD CONSTRAINT guid_limits_timezone_known
    CHECK (limits ->> 'timezone' IS NULL
           OR (timestamptz '2000-01-01 00:00+00' AT TIME ZONE (limits ->> 'timezone')) IS NOT NULL);
