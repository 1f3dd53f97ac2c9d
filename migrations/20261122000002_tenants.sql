-- Infrastructure tables: no tenant content, no RLS.

-- One customer of the gateway. `dispatch_secret` signs dispatches to the tenant's agent
-- (Standard Webhooks, `whsec_<base64>`); `agent_url` overrides the global default.
CREATE TABLE tenants (
    id              uuid PRIMARY KEY,
    slug            text NOT NULL UNIQUE CHECK (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    name            text NOT NULL,
    agent_url       text,
    dispatch_secret text NOT NULL CHECK (dispatch_secret LIKE 'whsec_%'),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- Tenant admin API keys. Only a SHA-256 of the key is stored; `prefix` is the visible,
-- non-secret start of the key that identifies it in listings and logs.
CREATE TABLE api_keys (
    id           uuid PRIMARY KEY,
    tenant_id    uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name         text NOT NULL DEFAULT '',
    prefix       text NOT NULL UNIQUE,
    key_hash     bytea NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX api_keys_tenant_idx ON api_keys (tenant_id);

GRANT SELECT, INSERT, UPDATE ON tenants TO channel_bridge_app;
GRANT SELECT, INSERT, UPDATE ON api_keys TO channel_bridge_app;
