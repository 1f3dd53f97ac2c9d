-- While the agent works on a turn, the worker shows the platform's typing indicator
-- (Telegram sendChatAction, WhatsApp's typing indicator with the read receipt, Slack's
-- assistant thread status). On by default: a person who sees nothing for the
-- seconds an agent thinks assumes the bot is broken. A connector turns it off when its
-- users should not see read receipts (WhatsApp marks the message read with the indicator)
-- or its bot lacks the scope for it.
ALTER TABLE channel_connectors
    ADD COLUMN typing_indicator boolean NOT NULL DEFAULT true;

-- Written by db::connectors::update (admin PATCH). The app role holds UPDATE on the whole
-- table today (migration 3); the column grant keeps it updatable should that become a
-- column list, as migration 16 made it for tenants and api_keys (the pattern of 18).
GRANT UPDATE (typing_indicator) ON channel_connectors TO channel_bridge_app;
