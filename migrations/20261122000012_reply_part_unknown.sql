-- A reply part whose send was interrupted on a platform that offers no way to look
-- (Telegram) under the at-most-once choice is `unknown`: never resent, visible to admins,
-- and the parts after it are still sent (they certainly were not).
ALTER TABLE channel_replies DROP CONSTRAINT channel_replies_status_check;
ALTER TABLE channel_replies ADD CONSTRAINT channel_replies_status_check
    CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'unknown'));
