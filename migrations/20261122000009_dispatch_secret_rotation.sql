-- Dispatch secret rotation without downtime: after a rotation, dispatches carry signatures
-- with both the new and the previous secret (Standard Webhooks allows several, space
-- separated) until the previous one expires, so the agent can switch at its own pace.
ALTER TABLE tenants
    ADD COLUMN previous_dispatch_secret text,
    ADD COLUMN previous_dispatch_secret_expires_at timestamptz;
