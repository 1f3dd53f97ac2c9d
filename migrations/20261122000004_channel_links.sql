-- Which tenant user a platform sender is. The same person linked on Slack and Telegram
-- maps to one user_id and so shares one history. user_id is the tenant's own identifier
-- (text: tenants' user ids are rarely UUIDs).
CREATE TABLE channel_links (
    tenant_id        uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    platform         text NOT NULL CHECK (platform IN ('slack', 'whatsapp', 'telegram')),
    platform_user_id text NOT NULL CHECK (platform_user_id <> ''),
    user_id          text NOT NULL CHECK (user_id <> ''),
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, platform, platform_user_id)
);
CREATE INDEX channel_links_user_idx ON channel_links (tenant_id, user_id);

ALTER TABLE channel_links ENABLE ROW LEVEL SECURITY;
ALTER TABLE channel_links FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON channel_links
    USING (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid)
    WITH CHECK (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

GRANT SELECT, INSERT, UPDATE, DELETE ON channel_links TO channel_bridge_app;
