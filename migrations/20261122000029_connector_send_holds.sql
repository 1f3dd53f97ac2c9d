-- A platform's rate limit is the connector's (a bot, a workspace, a number): when one
-- instance meets a 429, every instance holds that connector's reply sends until this time
-- (`delivery::holds`; each instance reads it with the connector's settings).
ALTER TABLE channel_connectors ADD COLUMN sends_held_until timestamptz;
