-- Replies are converted from the agent's Markdown (CommonMark) to each platform's own
-- formatting: Slack mrkdwn, Telegram HTML, WhatsApp's markers. On by default,
-- since agents answer in Markdown and raw `**` and ``` look broken on every platform; a
-- connector whose agent writes plain text (or whose readers want it) turns it off, and its
-- replies are posted exactly as before this migration.
ALTER TABLE channel_connectors
    ADD COLUMN format_markdown boolean NOT NULL DEFAULT true;

-- Written by db::connectors::update (admin PATCH). The app role holds UPDATE on the whole
-- table today; the column grant keeps it updatable should that become a column list, as
-- migration 16 made it for tenants and api_keys.
GRANT UPDATE (format_markdown) ON channel_connectors TO channel_bridge_app;
