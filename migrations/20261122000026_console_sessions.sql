-- Web console sessions (README "Web console"), kept in the database rather than in one
-- instance's memory: every instance behind a balancer knows every session (no sticky
-- sessions), signing out ends a session on all of them at once, and a restart signs no
-- one out. A session counts only while its admin key is live: each request checks the key
-- against api_keys, so revoking a key still ends its sessions.
--
-- Infrastructure, not tenant content (ids and a CSRF token, no message data): no RLS, like
-- api_keys. No foreign keys, like dispatch_queue (migration 22), so that on Citus it stays
-- a plain table on the coordinator; a session whose key or tenant is gone finds no live
-- key and ends.
--   id_hash   SHA-256 of the random id the cookie carries, so the table holds no usable
--             cookie
--   csrf      the token every form of the session carries, compared in constant time
CREATE TABLE console_sessions (
    id_hash    bytea PRIMARY KEY,
    tenant_id  uuid NOT NULL,
    key_id     uuid NOT NULL,
    key_prefix text NOT NULL,
    csrf       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

-- Expired sessions are swept a few at a time as new ones start, oldest first.
CREATE INDEX console_sessions_expiry_idx ON console_sessions (expires_at);

GRANT SELECT, INSERT, DELETE ON console_sessions TO channel_bridge_app;
