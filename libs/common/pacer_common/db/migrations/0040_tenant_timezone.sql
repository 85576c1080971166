-- A tenant's daily quota (sends_per_day) counts its own calendar day: the day of its time
-- zone, or, where it names none, of the sender counting (PACER_SENDER_TIMEZONE, the session
-- setting pacer.timezone). tenant_usage.day is that local date from now on; rows written
-- before hold UTC dates, and the one dated the tenant's local today is counted as its today.
-- A name the database does not know is refused as it is written (trigger tenants_timezone).
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS timezone text;
