-- Secrets at rest are sealed (crate::secrets): the columns below hold either a
-- plain value (written before CB_SECRETS_KEY was configured; `serve` seals those at start)
-- or `cbsealed:v1:<key id>:<base64url>`, AES-256-GCM bound to the row and purpose.
--   tenants.dispatch_secret, previous_dispatch_secret
--   channel_connectors.verification_secret, previous_verification_secret, verify_token,
--                      outbound_token
-- A sealed dispatch secret no longer starts with `whsec_`; the application generates them
-- (db::tenants::DispatchSecret), so the check goes.
ALTER TABLE tenants DROP CONSTRAINT IF EXISTS tenants_dispatch_secret_check;
