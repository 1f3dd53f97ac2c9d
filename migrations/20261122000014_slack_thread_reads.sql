-- Reading a Slack thread to find an interrupted reply part, within Slack's limits
-- (https://api.slack.com/methods/conversations.replies: Tier 1 for non-Marketplace apps,
-- 1 request per minute and 15 messages per page). One feature, two pieces: the per-workspace budget and
-- where a search that needs more pages than one pass may read resumes.

-- When each workspace may next call conversations.replies. Kept in the database, not in
-- each instance's memory, so that every instance spends one shared budget (Slack counts
-- per app and workspace, whoever calls). Keyed by the connector's workspace (its team id,
-- or the connector id when it has none) within the tenant: tenant content, under RLS like
-- every other tenant table, and its primary key starts with tenant_id (Citus).
CREATE TABLE slack_read_budget (
    tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    workspace text NOT NULL CHECK (workspace <> ''),
    next_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, workspace)
);

ALTER TABLE slack_read_budget ENABLE ROW LEVEL SECURITY;
ALTER TABLE slack_read_budget FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON slack_read_budget
    USING (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid)
    WITH CHECK (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

GRANT SELECT, INSERT, UPDATE ON slack_read_budget TO channel_bridge_app;

-- The next page of an unfinished search for a part in doubt: Slack's pagination cursor,
-- and the `sending_since` mark of the send it searches for. A cursor is only used for the
-- mark it was saved with, so a resend (a new mark) starts a new search without anything
-- having to clear the old cursor.
ALTER TABLE channel_replies
    ADD COLUMN search_cursor text,
    ADD COLUMN search_mark timestamptz;
