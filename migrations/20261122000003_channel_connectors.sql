-- One platform endpoint of a tenant. Tenant content: under RLS (see the policy below).
-- The primary key starts with tenant_id so the table can be distributed by tenant (Citus).
CREATE TABLE channel_connectors (
    tenant_id                    uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    id                           uuid NOT NULL,
    platform                     text NOT NULL CHECK (platform IN ('slack', 'whatsapp', 'telegram')),
    name                         text NOT NULL DEFAULT '',
    -- Slack team id, WhatsApp phone_number_id, Telegram bot id.
    external_id                  text,
    -- Slack api_app_id.
    app_id                       text,
    -- The bot's own identity, for echo filtering (Slack bot user U… and bot_id B…).
    bot_user_id                  text,
    bot_id                       text,
    -- Slack signing secret / Meta app secret / Telegram secret_token. Stored in clear because
    -- HMAC verification needs the key itself; never returned by the API, never logged.
    verification_secret          text NOT NULL CHECK (verification_secret <> ''),
    -- The secret replaced by the last rotation stays valid until this time (Slack: 24 h).
    previous_verification_secret text,
    previous_secret_expires_at   timestamptz,
    -- Meta's hub.verify_token for the GET handshake; NULL refuses every handshake.
    verify_token                 text,
    -- Slack bot token / WhatsApp access token / Telegram bot token.
    outbound_token               text,
    -- Override of the platform API host (tests, proxies); NULL = the platform's own.
    api_base_url                 text,
    enabled                      boolean NOT NULL DEFAULT true,
    unlinked_policy              text NOT NULL DEFAULT 'deny' CHECK (unlinked_policy IN ('deny', 'allow')),
    created_at                   timestamptz NOT NULL DEFAULT now(),
    updated_at                   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);

ALTER TABLE channel_connectors ENABLE ROW LEVEL SECURITY;
ALTER TABLE channel_connectors FORCE ROW LEVEL SECURITY;
-- Fail closed: with no tenant set the setting reads NULL (or '' once the backend has seen
-- it), the comparison is NULL, and no row is visible or writable. No sub-select, so the
-- policy also works on a Citus-distributed table.
CREATE POLICY tenant_isolation ON channel_connectors
    USING (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid)
    WITH CHECK (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

GRANT SELECT, INSERT, UPDATE, DELETE ON channel_connectors TO channel_bridge_app;
