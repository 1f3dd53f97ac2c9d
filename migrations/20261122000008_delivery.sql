-- Reply delivery (docs/delivery.md).

-- Telegram has no way to ask whether an interrupted send went through: each connector
-- chooses between never resending (at-most-once, the default: a lost reply is better than
-- a doubled one in most chats) and resending (at-least-once).
ALTER TABLE channel_connectors
    ADD COLUMN telegram_delivery text NOT NULL DEFAULT 'at_most_once'
        CHECK (telegram_delivery IN ('at_most_once', 'at_least_once')),
    -- Optional text posted to an unlinked sender (deny policy), at most once a day each.
    ADD COLUMN unlinked_notice text;

-- Set when every reply part of the turn is posted: only then is the turn delivered.
ALTER TABLE channel_messages ADD COLUMN delivered_at timestamptz;

-- When the part entered `sending`: how long an unconfirmed WhatsApp send waits for its
-- status callback before it is resent.
ALTER TABLE channel_replies ADD COLUMN sending_since timestamptz;

-- One row per (connector, sender, day) an unlinked notice was posted; the primary key
-- makes "at most once a day" a unique-index decision, with no check-then-insert race.
CREATE TABLE channel_notices (
    tenant_id        uuid NOT NULL,
    connector_id     uuid NOT NULL,
    platform_user_id text NOT NULL,
    day              date NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, connector_id, platform_user_id, day),
    FOREIGN KEY (tenant_id, connector_id) REFERENCES channel_connectors (tenant_id, id) ON DELETE CASCADE
);

ALTER TABLE channel_notices ENABLE ROW LEVEL SECURITY;
ALTER TABLE channel_notices FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON channel_notices
    USING (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid)
    WITH CHECK (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

GRANT SELECT, INSERT, DELETE ON channel_notices TO channel_bridge_app;
