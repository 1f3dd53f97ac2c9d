-- A queue that does not need VACUUM (docs/operations.md#the-queue-without-vacuum). Every
-- finished job leaves dead index entries where the claim looks, and only VACUUM removes
-- them; the runtime role cannot vacuum (it does not own the table), but it may be granted
-- TRUNCATE. So jobs go into one of two generations (partitions): new jobs into the current
-- one; once the other has drained, the gateway truncates it under a short lock, and when the
-- current one has taken enough jobs, the fresh one becomes current (`Queue::rotate`).

CREATE TABLE dispatch_queue_generation (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    current     smallint NOT NULL CHECK (current IN (0, 1)),
    -- `seq` when it became current: how many jobs it has taken since.
    started_seq bigint NOT NULL,
    -- The other generation has been truncated since it was current.
    other_fresh boolean NOT NULL
);

CREATE FUNCTION channel_bridge_queue_generation() RETURNS smallint
LANGUAGE sql STABLE AS $$ SELECT current FROM dispatch_queue_generation $$;

ALTER TABLE dispatch_queue RENAME TO dispatch_queue_unsplit;
ALTER INDEX dispatch_queue_conversation_idx RENAME TO dispatch_queue_unsplit_conversation_idx;
ALTER INDEX dispatch_queue_claim_idx RENAME TO dispatch_queue_unsplit_claim_idx;
ALTER INDEX dispatch_queue_tenant_ready_idx RENAME TO dispatch_queue_unsplit_tenant_ready_idx;
ALTER INDEX dispatch_queue_pkey RENAME TO dispatch_queue_unsplit_pkey;

-- The identity's sequence goes with the identity; a plain one of the same name continues it.
CREATE TEMPORARY TABLE queue_next_seq AS
    SELECT coalesce(max(seq), 0) + 1 AS next FROM dispatch_queue_unsplit;
ALTER TABLE dispatch_queue_unsplit ALTER COLUMN seq DROP IDENTITY;
CREATE SEQUENCE dispatch_queue_seq_seq;
SELECT setval('dispatch_queue_seq_seq', next, false) FROM queue_next_seq;
INSERT INTO dispatch_queue_generation (current, started_seq, other_fresh)
    SELECT 0, next, true FROM queue_next_seq;
DROP TABLE queue_next_seq;

-- A message has at most one job: the primary key holds within a generation, and every
-- enqueue comes with a guarded change of the message's row (ingress inserts it, the admin
-- actions update it from a status that excludes a job in flight).
CREATE TABLE dispatch_queue (
    message_id       uuid NOT NULL,
    tenant_id        uuid NOT NULL,
    conversation_key text NOT NULL,
    seq              bigint NOT NULL DEFAULT nextval('dispatch_queue_seq_seq'),
    stage            text NOT NULL DEFAULT 'dispatch' CHECK (stage IN ('dispatch', 'reply')),
    available_at     timestamptz NOT NULL DEFAULT now(),
    lease_owner      uuid,
    attempts         integer NOT NULL DEFAULT 0,
    enqueued_at      timestamptz NOT NULL DEFAULT now(),
    generation       smallint NOT NULL DEFAULT channel_bridge_queue_generation(),
    PRIMARY KEY (message_id, generation)
) PARTITION BY LIST (generation);
ALTER SEQUENCE dispatch_queue_seq_seq OWNED BY dispatch_queue.seq;

CREATE TABLE dispatch_queue_0 PARTITION OF dispatch_queue FOR VALUES IN (0) WITH (fillfactor = 70);
CREATE TABLE dispatch_queue_1 PARTITION OF dispatch_queue FOR VALUES IN (1) WITH (fillfactor = 70);

CREATE INDEX dispatch_queue_conversation_idx ON dispatch_queue (tenant_id, conversation_key, seq);
CREATE INDEX dispatch_queue_claim_idx ON dispatch_queue (available_at, seq);
CREATE INDEX dispatch_queue_tenant_ready_idx ON dispatch_queue (tenant_id, available_at, seq);

INSERT INTO dispatch_queue (message_id, tenant_id, conversation_key, seq, stage, available_at,
                            lease_owner, attempts, enqueued_at, generation)
    SELECT message_id, tenant_id, conversation_key, seq, stage, available_at, lease_owner,
           attempts, enqueued_at, 0
      FROM dispatch_queue_unsplit;
DROP TABLE dispatch_queue_unsplit;

GRANT SELECT, INSERT, UPDATE, DELETE ON dispatch_queue TO channel_bridge_app;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON dispatch_queue_0, dispatch_queue_1 TO channel_bridge_app;
GRANT SELECT, UPDATE ON dispatch_queue_generation TO channel_bridge_app;
GRANT USAGE ON SEQUENCE dispatch_queue_seq_seq TO channel_bridge_app;
GRANT EXECUTE ON FUNCTION channel_bridge_queue_generation() TO channel_bridge_app;
