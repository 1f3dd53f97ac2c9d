//! `audit_log` (RLS, append-only for the app role): each record is written in the
//! transaction of the change it records; details never hold message text or secrets.

use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::TenantTx;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actor {
    /// A tenant admin, by the id of the API key they used.
    ApiKey(Uuid),
    Operator,
    Cli,
    /// The agent, asking for a person in an answer.
    Agent,
    /// The gateway itself, returning a held conversation after the tenant's return time.
    Gateway,
}

impl Actor {
    pub fn as_text(self) -> String {
        match self {
            Actor::ApiKey(id) => id.to_string(),
            Actor::Operator => "operator".into(),
            Actor::Cli => "cli".into(),
            Actor::Agent => "agent".into(),
            Actor::Gateway => "gateway".into(),
        }
    }
}

/// What was done. The stored names are part of the API (`GET /v1/admin/audit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditAction {
    ConnectorCreate,
    /// Any change by PATCH; `details.secrets` names the secrets it replaced.
    ConnectorUpdate,
    ConnectorDisable,
    ConnectorDelete,
    DispatchSecretRotate,
    /// Name, agent URL, history scope or retention (`details.fields`).
    TenantUpdate,
    LinkSet,
    LinkDelete,
    MessagesRedispatch,
    MessagesResend,
    PersonErase,
    /// The operator (or the database CLI) issued an admin key (`details.name`, `prefix`).
    KeyIssue,
    KeyRevoke,
    /// A person (or the agent, asking for one) holds a conversation (`target` is its id).
    ConversationTakeOver,
    ConversationHandBack,
    /// A person's message posted into a conversation (`details.message_id`; no text).
    ConversationMessage,
}

impl AuditAction {
    pub const ALL: [AuditAction; 16] = [
        Self::ConnectorCreate,
        Self::ConnectorUpdate,
        Self::ConnectorDisable,
        Self::ConnectorDelete,
        Self::DispatchSecretRotate,
        Self::TenantUpdate,
        Self::LinkSet,
        Self::LinkDelete,
        Self::MessagesRedispatch,
        Self::MessagesResend,
        Self::PersonErase,
        Self::KeyIssue,
        Self::KeyRevoke,
        Self::ConversationTakeOver,
        Self::ConversationHandBack,
        Self::ConversationMessage,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::ConnectorCreate => "connector.create",
            Self::ConnectorUpdate => "connector.update",
            Self::ConnectorDisable => "connector.disable",
            Self::ConnectorDelete => "connector.delete",
            Self::DispatchSecretRotate => "tenant.rotate_dispatch_secret",
            Self::TenantUpdate => "tenant.update",
            Self::LinkSet => "link.set",
            Self::LinkDelete => "link.delete",
            Self::MessagesRedispatch => "messages.redispatch",
            Self::MessagesResend => "messages.resend",
            Self::PersonErase => "person.erase",
            Self::KeyIssue => "key.issue",
            Self::KeyRevoke => "key.revoke",
            Self::ConversationTakeOver => "conversation.take_over",
            Self::ConversationHandBack => "conversation.hand_back",
            Self::ConversationMessage => "conversation.message",
        }
    }
}

#[derive(Debug, Clone)]
pub struct AuditEntry {
    pub actor: Actor,
    pub action: AuditAction,
    pub target: String,
    /// A JSON object: ids, counts, field names. Never content or secrets.
    pub details: Value,
}

impl AuditEntry {
    pub fn new(actor: Actor, action: AuditAction, target: impl Into<String>, details: Value) -> Self {
        Self {
            actor,
            action,
            target: target.into(),
            details,
        }
    }
}

/// The time is read here, not by `now()`: one clock for the record and the listing's cursor.
pub async fn record(tx: &mut TenantTx, entry: &AuditEntry) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query(
        "insert into audit_log (tenant_id, id, at, actor, action, target, details)
         values ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(tenant)
    .bind(Uuid::now_v7())
    .bind(chrono::Utc::now())
    .bind(entry.actor.as_text())
    .bind(entry.action.as_str())
    .bind(&entry.target)
    .bind(&entry.details)
    .execute(tx.conn())
    .await?;
    Ok(())
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct AuditRow {
    pub id: Uuid,
    pub at: chrono::DateTime<chrono::Utc>,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub details: Value,
}

pub async fn list(
    tx: &mut TenantTx,
    before: Option<(chrono::DateTime<chrono::Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<AuditRow>, sqlx::Error> {
    let tenant = tx.tenant();
    let (at, id) = before.unzip();
    sqlx::query_as(
        "select id, at, actor, action, target, details from audit_log
          where tenant_id = $1 and ($2::timestamptz is null or (at, id) < ($2, $3))
          order by at desc, id desc limit $4",
    )
    .bind(tenant)
    .bind(at)
    .bind(id)
    .bind(limit)
    .fetch_all(tx.conn())
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_is_listed_once_under_its_own_name() {
        for action in AuditAction::ALL {
            match action {
                AuditAction::ConnectorCreate
                | AuditAction::ConnectorUpdate
                | AuditAction::ConnectorDisable
                | AuditAction::ConnectorDelete
                | AuditAction::DispatchSecretRotate
                | AuditAction::TenantUpdate
                | AuditAction::LinkSet
                | AuditAction::LinkDelete
                | AuditAction::MessagesRedispatch
                | AuditAction::MessagesResend
                | AuditAction::PersonErase
                | AuditAction::KeyIssue
                | AuditAction::KeyRevoke
                | AuditAction::ConversationTakeOver
                | AuditAction::ConversationHandBack
                | AuditAction::ConversationMessage => {}
            }
        }
        let names: std::collections::HashSet<_> = AuditAction::ALL.map(AuditAction::as_str).into();
        assert_eq!(names.len(), AuditAction::ALL.len());
    }

    #[test]
    fn actors_are_stored_as_the_check_constraint_allows() {
        let key = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        assert_eq!(
            Actor::ApiKey(key).as_text(),
            "01234567-89ab-cdef-0123-456789abcdef"
        );
        assert_eq!(Actor::Operator.as_text(), "operator");
        assert_eq!(Actor::Cli.as_text(), "cli");
        assert_eq!(Actor::Agent.as_text(), "agent");
        assert_eq!(Actor::Gateway.as_text(), "gateway");
    }
}
