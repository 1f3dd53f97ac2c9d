-- Feedback events (docs/agent.md#reactions-feedback-on-answers): a tenant that opts in
-- (tenants.feedback_events, off by default) gets a signed `feedback` POST at its agent URL
-- for each change a person makes to their reaction on an answer.
ALTER TABLE tenants ADD COLUMN feedback_events boolean NOT NULL DEFAULT false;
-- Written by db::tenants::update (admin PATCH), as history_scope (migration 19).
GRANT UPDATE (feedback_events) ON tenants TO channel_bridge_app;

-- The events to send, apart from the turns' queue so that none ever holds a turn up. A
-- row names the change (the answered turn, who, and when they reacted) and holds no
-- content: the sender reads the reaction under the tenant's row-level security, and a
-- change superseded meanwhile is not sent (its successor is). Local to the coordinator on
-- Citus, as the dispatch queue is (no row-level security, so channel_bridge_distribute
-- leaves it): claimed with FOR UPDATE SKIP LOCKED across tenants.
CREATE TABLE feedback_queue (
    id               bigserial PRIMARY KEY,
    tenant_id        uuid NOT NULL,
    message_id       uuid NOT NULL,
    platform_user_id text NOT NULL,
    reacted_at       timestamptz NOT NULL,
    attempts         integer NOT NULL DEFAULT 0,
    due_at           timestamptz NOT NULL DEFAULT now(),
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX feedback_queue_due_idx ON feedback_queue (due_at);

GRANT SELECT, INSERT, UPDATE, DELETE ON feedback_queue TO channel_bridge_app;
GRANT USAGE ON SEQUENCE feedback_queue_id_seq TO channel_bridge_app;
