-- Files and reactions in answers (docs/agent.md#files-and-reactions-in-answers).
--
-- channel_replies.attachment: on a part that posts a file, the file the answer named
-- (crate::media::outgoing::OutgoingFile: its name, MIME type and URL or inline bytes); the
-- part's `content` is the caption. NULL for every other part.
-- channel_replies.upload_ref: what the platform answered for the file's bytes before the
-- message that shows them was posted (Slack's file id after files.getUploadURLExternal and
-- the upload, WhatsApp's media id): kept so that an interrupted post is settled by it, and
-- the bytes are never uploaded (nor, on Slack, shared) twice.
-- channel_replies.reaction: a part that sets a reaction (its `content`, an emoji) on the
-- user's message instead of posting one. Setting it again changes nothing, so a reaction
-- in doubt is simply set again.
--
-- Citus: DDL on distributed tables one shard at a time, one statement each (migration 31).
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';
DO $$
BEGIN
    EXECUTE 'ALTER TABLE channel_replies ADD COLUMN attachment jsonb';
    EXECUTE 'ALTER TABLE channel_replies ADD COLUMN upload_ref text';
    EXECUTE 'ALTER TABLE channel_replies ADD COLUMN reaction boolean NOT NULL DEFAULT false';
END $$;
