-- A streamed answer is shown on the platform while the agent writes it: Slack's
-- chat.startStream message, or the Telegram group message that is edited as the text
-- grows. That platform message outlives a crash of the worker showing it, so its id is kept
-- here, written (under the job's lease) as soon as the platform returns it. When the answer
-- is stored, its first reply part *adopts* that message (chat.stopStream + chat.update,
-- editMessageText) instead of posting a new one; a worker that claims the turn again after
-- a crash finds the id and completes the same message, so one user turn never ends with
-- two final answers. NULL: nothing durable was shown (no stream, a Telegram private-chat
-- draft, WhatsApp). Not content: an id on the platform, like channel_replies.platform_message_id.
ALTER TABLE channel_messages
    ADD COLUMN live_message_id text;

-- Written by db::turns (Transition::LiveShown). The app role holds UPDATE on the whole
-- table today (migration 5); the column grant keeps it updatable should that become a
-- column list (the pattern of migrations 18 and 21).
GRANT UPDATE (live_message_id) ON channel_messages TO channel_bridge_app;
