-- The app role may change only the columns the code changes: a
-- statement that slipped past the code (injected SQL, a bug) cannot move an API key to
-- another tenant (`api_keys.tenant_id`), swap a key's hash for one it knows
-- (`api_keys.key_hash`), or rename or re-key a tenant (`tenants.id`, `tenants.slug`).
-- Where each column is written:
--   tenants.name, agent_url, updated_at          db::tenants::update (tenant admin PATCH)
--   tenants.max_in_flight, updated_at            db::tenants::set_max_in_flight (operator)
--   tenants.dispatch_secret, previous_dispatch_secret, previous_dispatch_secret_expires_at,
--           updated_at                           db::tenants::rotate_dispatch_secret
--   api_keys.last_used_at                        db::api_keys::authenticate
--   api_keys.revoked_at                          db::api_keys::revoke
-- SELECT and INSERT stay table-wide: a tenant and a key are created whole, and reading the
-- dispatch secret is what signing needs (the same role does both). DELETE was never
-- granted.
-- A column added to these tables later is not updatable by the app role until a
-- migration grants it: the safe default.
-- Not under RLS: authentication looks a key up by its hash before any tenant is known,
-- and the worker reads every tenant's caps; policies there would need a second,
-- tenant-less door.
REVOKE UPDATE ON tenants FROM channel_bridge_app;
GRANT UPDATE (name, agent_url, max_in_flight, dispatch_secret, previous_dispatch_secret,
              previous_dispatch_secret_expires_at, updated_at)
    ON tenants TO channel_bridge_app;

REVOKE UPDATE ON api_keys FROM channel_bridge_app;
GRANT UPDATE (last_used_at, revoked_at) ON api_keys TO channel_bridge_app;
