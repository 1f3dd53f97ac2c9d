-- channel_messages.command: on a Slack slash command's turn, the command (`/ask`); the
-- turn's request_content is the text that followed it (docs/platforms.md#slash-commands).
-- Written once at ingress and in no index, so the turn's updates stay HOT (migration 10).
ALTER TABLE channel_messages ADD COLUMN command text;
