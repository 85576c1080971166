-- Tenants: one per gateway token (DESIGN.md "Gateway contract, all actions", "Tenants").
--
-- A tenant is its gateway's base URL, the bearer credential the senders send it, the secret
-- its callbacks are signed with, and its quotas. Both secrets are held here in clear because
-- Pacer must present them (a bearer token) or recompute with them (an HMAC): restrict who
-- reads this table, and the Control API never returns either.
--
-- The tenant ``default`` exists out of the box with no URL and no secrets of its own: the
-- senders use PACER_GATEWAY_URL and PACER_GATEWAY_CREDENTIAL for it, the intake
-- PACER_INTAKE_DEFAULT_CALLBACK_SECRET. Setting them here overrides the settings.
CREATE TABLE tenants (
    name            text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    base_url        text,
    credential      text,
    callback_secret text,
    sends_per_day   integer CHECK (sends_per_day > 0),
    max_guids       integer CHECK (max_guids > 0),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
INSERT INTO tenants (name) VALUES ('default');

-- Every job belongs to one tenant; its items (and their compensations) through the job.
ALTER TABLE jobs ADD COLUMN tenant text NOT NULL DEFAULT 'default' REFERENCES tenants (name);
CREATE INDEX jobs_tenant ON jobs (tenant, created_at);

-- Which tenant a guid belongs to: set by the first job that names it, then fixed (a job of
-- another tenant naming it is refused). Counted against the tenant's max_guids.
CREATE TABLE tenant_guids (
    guid       text PRIMARY KEY,
    tenant     text NOT NULL REFERENCES tenants (name),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tenant_guids_tenant ON tenant_guids (tenant);

-- A Control API token scoped to tenants sees and changes only their jobs; NULL: every tenant.
ALTER TABLE api_tokens ADD COLUMN tenants text[];

-- Sends per tenant per UTC day, against its sends_per_day: each sender adds what it sent
-- every second or so and reads the totals back (a soft quota: senders may overshoot it by
-- what they send within one such round).
CREATE TABLE tenant_usage (
    tenant text NOT NULL REFERENCES tenants (name),
    day    date NOT NULL,
    sends  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, day)
);
