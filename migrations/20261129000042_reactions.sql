-- People's reactions to the agent's (or a person's) posted answers: feedback, never a turn
-- (docs/agent.md#reactions-feedback-on-answers). One row per answered turn and person, their
-- latest state: the emoji now on the answer (null once removed), its value (+1 for 👍,
-- -1 for 👎 and their platform spellings, else 0), which reply part it is on, and when the
-- platform says they reacted (a later state wins; the same event again changes nothing).
-- Tenant content: RLS, and distributed with the messages on Citus (channel_bridge_distribute
-- finds it), where its foreign key to the turn (so erasure and retention take the reactions
-- along) can only be added once both are distributed.
CREATE TABLE channel_reactions (
    tenant_id        uuid NOT NULL,
    message_id       uuid NOT NULL,
    platform_user_id text NOT NULL,
    part_index       integer NOT NULL CHECK (part_index >= 0),
    emoji            text,
    value            smallint NOT NULL DEFAULT 0 CHECK (value IN (-1, 0, 1)),
    reacted_at       timestamptz NOT NULL,
    recorded_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, message_id, platform_user_id)
);

ALTER TABLE channel_reactions ENABLE ROW LEVEL SECURITY;
ALTER TABLE channel_reactions FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON channel_reactions
    USING (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid)
    WITH CHECK (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

GRANT SELECT, INSERT, UPDATE, DELETE ON channel_reactions TO channel_bridge_app;

SELECT channel_bridge_distribute();

DO $$
BEGIN
    EXECUTE 'ALTER TABLE channel_reactions ADD CONSTRAINT channel_reactions_message_fkey
                 FOREIGN KEY (tenant_id, message_id) REFERENCES channel_messages (tenant_id, id)
                 ON DELETE CASCADE';
END $$;
