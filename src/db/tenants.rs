//! `tenants`: infrastructure rows (no RLS), read by id or slug. Dispatch secrets are stored
//! sealed (`crate::secrets`) and opened as a row is read.

use base64::Engine;
use rand::RngCore;
use secrecy::{ExposeSecret, SecretString};
use sqlx::PgConnection;

use crate::domain::{HistoryScopeSetting, TenantId};
use crate::secrets::{Binding, Keyring, SecretError};

#[derive(Debug, Clone)]
pub struct TenantRow {
    pub id: TenantId,
    pub slug: String,
    pub name: String,
    pub agent_url: Option<String>,
    pub dispatch_secret: DispatchSecret,
    pub previous_dispatch_secret: Option<SecretString>,
    /// `None`: the instance default.
    pub max_in_flight: Option<i32>,
    pub history_scope: HistoryScopeSetting,
    /// The agent is sent a signed `feedback` event for each change of a person's reaction
    /// to an answer.
    pub feedback_events: bool,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

impl TenantRow {
    /// The secrets what the gateway sends the agent is signed with: the current one, and the
    /// previous one while its grace lasts (a signature each, so an agent with either checks).
    pub fn signing_secrets(&self) -> Vec<&str> {
        let mut secrets = vec![self.dispatch_secret.0.expose_secret()];
        secrets.extend(self.previous_dispatch_secret.as_ref().map(|s| s.expose_secret()));
        secrets
    }
}

#[derive(sqlx::FromRow)]
struct StoredTenant {
    id: TenantId,
    slug: String,
    name: String,
    agent_url: Option<String>,
    dispatch_secret: String,
    previous_dispatch_secret: Option<String>,
    previous_dispatch_secret_expires_at: Option<chrono::DateTime<chrono::Utc>>,
    max_in_flight: Option<i32>,
    history_scope: String,
    feedback_events: bool,
    created_at: chrono::DateTime<chrono::Utc>,
}

impl StoredTenant {
    fn open(self, keys: &Keyring) -> Result<TenantRow, sqlx::Error> {
        let binding = Binding::dispatch(self.id);
        // Not `now()`: Citus refuses a non-immutable function in an update's RETURNING.
        let live_previous = self
            .previous_dispatch_secret
            .filter(|_| self.previous_dispatch_secret_expires_at > Some(chrono::Utc::now()));
        Ok(TenantRow {
            dispatch_secret: DispatchSecret(keys.open(&self.dispatch_secret, &binding).map_err(unopened)?),
            previous_dispatch_secret: keys
                .open_opt(live_previous.as_deref(), &binding)
                .map_err(unopened)?,
            id: self.id,
            slug: self.slug,
            name: self.name,
            agent_url: self.agent_url,
            max_in_flight: self.max_in_flight,
            history_scope: self
                .history_scope
                .parse()
                .map_err(|e: String| sqlx::Error::Decode(e.into()))?,
            feedback_events: self.feedback_events,
            created_at: self.created_at,
        })
    }
}

/// A database error, so the HTTP layer answers 503 and the worker retries until the
/// operator fixes `CB_SECRETS_KEY`.
pub fn unopened(err: SecretError) -> sqlx::Error {
    sqlx::Error::Decode(Box::new(err))
}

const COLUMNS: &str = "id, slug, name, agent_url, dispatch_secret, previous_dispatch_secret,
    previous_dispatch_secret_expires_at, max_in_flight, history_scope, feedback_events, created_at";

/// `whsec_<base64 of 32 random bytes>`; the HMAC key is the decoded bytes.
#[derive(Clone, Debug)]
pub struct DispatchSecret(pub SecretString);

impl DispatchSecret {
    pub fn generate() -> Self {
        let mut bytes = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
        Self(SecretString::from(format!("whsec_{encoded}")))
    }
}

pub struct NewTenant<'a> {
    pub slug: &'a str,
    pub name: &'a str,
    pub agent_url: Option<&'a str>,
}

pub async fn insert(
    conn: &mut PgConnection,
    keys: &Keyring,
    new: &NewTenant<'_>,
) -> Result<TenantRow, sqlx::Error> {
    let id = TenantId::new();
    let secret = DispatchSecret::generate();
    let sealed = keys
        .seal(secret.0.expose_secret(), &Binding::dispatch(id))
        .map_err(unopened)?;
    let stored: StoredTenant = sqlx::query_as(&format!(
        "insert into tenants (id, slug, name, agent_url, dispatch_secret)
         values ($1, $2, $3, $4, $5)
         returning {COLUMNS}"
    ))
    .bind(id)
    .bind(new.slug)
    .bind(new.name)
    .bind(new.agent_url)
    .bind(sealed)
    .fetch_one(conn)
    .await?;
    stored.open(keys)
}

pub async fn history_scope(
    conn: &mut PgConnection,
    id: TenantId,
) -> Result<Option<HistoryScopeSetting>, sqlx::Error> {
    let scope: Option<String> = sqlx::query_scalar("select history_scope from tenants where id = $1")
        .bind(id)
        .fetch_optional(conn)
        .await?;
    scope
        .map(|s| s.parse().map_err(|e: String| sqlx::Error::Decode(e.into())))
        .transpose()
}

pub async fn get(
    conn: &mut PgConnection,
    keys: &Keyring,
    id: TenantId,
) -> Result<Option<TenantRow>, sqlx::Error> {
    let stored: Option<StoredTenant> =
        sqlx::query_as(&format!("select {COLUMNS} from tenants where id = $1"))
            .bind(id)
            .fetch_optional(conn)
            .await?;
    stored.map(|t| t.open(keys)).transpose()
}

/// `None` keeps a field.
#[derive(Debug, Default, Clone, Copy)]
pub struct TenantChange<'a> {
    pub name: Option<&'a str>,
    /// `Some("")` clears it, falling back to CB_AGENT_URL.
    pub agent_url: Option<&'a str>,
    pub history_scope: Option<HistoryScopeSetting>,
    pub feedback_events: Option<bool>,
}

pub async fn update(
    conn: &mut PgConnection,
    keys: &Keyring,
    id: TenantId,
    change: TenantChange<'_>,
) -> Result<Option<TenantRow>, sqlx::Error> {
    let stored: Option<StoredTenant> = sqlx::query_as(&format!(
        "update tenants set name = coalesce($2, name),
                agent_url = case when $3::text is null then agent_url else nullif($3, '') end,
                history_scope = coalesce($4, history_scope),
                feedback_events = coalesce($5, feedback_events),
                updated_at = now()
          where id = $1 returning {COLUMNS}"
    ))
    .bind(id)
    .bind(change.name)
    .bind(change.agent_url)
    .bind(change.history_scope.map(HistoryScopeSetting::as_str))
    .bind(change.feedback_events)
    .fetch_optional(conn)
    .await?;
    stored.map(|t| t.open(keys)).transpose()
}

/// The operator's to set, never the tenant's.
pub async fn set_max_in_flight(
    conn: &mut PgConnection,
    keys: &Keyring,
    id: TenantId,
    max_in_flight: Option<i32>,
) -> Result<Option<TenantRow>, sqlx::Error> {
    let stored: Option<StoredTenant> = sqlx::query_as(&format!(
        "update tenants set max_in_flight = $2, updated_at = now() where id = $1 returning {COLUMNS}"
    ))
    .bind(id)
    .bind(max_in_flight)
    .fetch_optional(conn)
    .await?;
    stored.map(|t| t.open(keys)).transpose()
}

/// Replaces the dispatch secret; the old one keeps signing alongside for `grace`.
pub async fn rotate_dispatch_secret(
    conn: &mut PgConnection,
    keys: &Keyring,
    id: TenantId,
    grace: std::time::Duration,
) -> Result<Option<DispatchSecret>, sqlx::Error> {
    let secret = DispatchSecret::generate();
    let sealed = keys
        .seal(secret.0.expose_secret(), &Binding::dispatch(id))
        .map_err(unopened)?;
    let done = sqlx::query(
        "update tenants set previous_dispatch_secret = dispatch_secret,
                previous_dispatch_secret_expires_at = now() + make_interval(secs => $3),
                dispatch_secret = $2, updated_at = now()
          where id = $1",
    )
    .bind(id)
    .bind(sealed)
    .bind(grace.as_secs_f64())
    .execute(conn)
    .await?;
    Ok((done.rows_affected() == 1).then_some(secret))
}

/// Text of UUID form is an id (`provision::create_tenant` refuses such slugs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantRef {
    Id(TenantId),
    Slug(String),
}

impl TenantRef {
    /// `None` for text that is neither a UUID nor slug-shaped: it names no tenant.
    pub fn parse(text: &str) -> Option<Self> {
        if let Ok(id) = text.parse::<TenantId>() {
            return Some(Self::Id(id));
        }
        is_slug(text).then(|| Self::Slug(text.to_owned()))
    }

    /// A condition on `tenants t` for `$1`, and the value to bind as text.
    fn condition(&self) -> (&'static str, String) {
        match self {
            Self::Id(id) => ("t.id = $1::uuid", id.to_string()),
            Self::Slug(slug) => ("t.slug = $1", slug.clone()),
        }
    }
}

/// The `tenants_slug_check` constraint's rule: `^[a-z0-9][a-z0-9-]{0,62}$`.
pub fn is_slug(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && text.len() <= 63
}

#[derive(Debug, Clone)]
pub struct TenantSummary {
    pub id: TenantId,
    pub slug: String,
    pub name: String,
    pub agent_url: Option<String>,
    pub max_in_flight: Option<i32>,
    pub history_scope: HistoryScopeSetting,
    pub active_keys: i64,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

#[derive(sqlx::FromRow)]
struct StoredSummary {
    id: TenantId,
    slug: String,
    name: String,
    agent_url: Option<String>,
    max_in_flight: Option<i32>,
    history_scope: String,
    active_keys: i64,
    created_at: chrono::DateTime<chrono::Utc>,
    updated_at: chrono::DateTime<chrono::Utc>,
}

impl TryFrom<StoredSummary> for TenantSummary {
    type Error = sqlx::Error;

    fn try_from(row: StoredSummary) -> Result<Self, Self::Error> {
        Ok(Self {
            history_scope: row
                .history_scope
                .parse()
                .map_err(|e: String| sqlx::Error::Decode(e.into()))?,
            id: row.id,
            slug: row.slug,
            name: row.name,
            agent_url: row.agent_url,
            max_in_flight: row.max_in_flight,
            active_keys: row.active_keys,
            created_at: row.created_at,
            updated_at: row.updated_at,
        })
    }
}

const SUMMARY: &str = "select t.id, t.slug, t.name, t.agent_url, t.max_in_flight, t.history_scope,
        (select count(*) from api_keys k where k.tenant_id = t.id and k.revoked_at is null) as active_keys,
        t.created_at, t.updated_at
   from tenants t";

pub async fn list_summaries(
    conn: &mut PgConnection,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<TenantSummary>, sqlx::Error> {
    let rows: Vec<StoredSummary> = sqlx::query_as(&format!(
        "{SUMMARY} where $1::text is null or t.slug > $1 order by t.slug limit $2"
    ))
    .bind(after)
    .bind(limit)
    .fetch_all(conn)
    .await?;
    rows.into_iter().map(TenantSummary::try_from).collect()
}

pub async fn summary(
    conn: &mut PgConnection,
    tenant: &TenantRef,
) -> Result<Option<TenantSummary>, sqlx::Error> {
    let (condition, value) = tenant.condition();
    let row: Option<StoredSummary> = sqlx::query_as(&format!("{SUMMARY} where {condition}"))
        .bind(value)
        .fetch_optional(conn)
        .await?;
    row.map(TenantSummary::try_from).transpose()
}

pub async fn resolve(conn: &mut PgConnection, tenant: &TenantRef) -> Result<Option<TenantId>, sqlx::Error> {
    let (condition, value) = tenant.condition();
    sqlx::query_scalar(&format!("select t.id from tenants t where {condition}"))
        .bind(value)
        .fetch_optional(conn)
        .await
}

/// `None` keeps a field.
#[derive(Debug, Default, Clone, Copy)]
pub struct OperatorChange<'a> {
    pub name: Option<&'a str>,
    pub history_scope: Option<HistoryScopeSetting>,
    /// `Some(None)` returns the tenant to the instance default.
    pub max_in_flight: Option<Option<i32>>,
}

pub async fn operator_update(
    conn: &mut PgConnection,
    id: TenantId,
    change: OperatorChange<'_>,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "update tenants set name = coalesce($2, name),
                history_scope = coalesce($3, history_scope),
                max_in_flight = case when $4 then $5 else max_in_flight end,
                updated_at = now()
          where id = $1",
    )
    .bind(id)
    .bind(change.name)
    .bind(change.history_scope.map(HistoryScopeSetting::as_str))
    .bind(change.max_in_flight.is_some())
    .bind(change.max_in_flight.flatten())
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_of_uuid_form_is_an_id_slug_shaped_text_a_slug_and_anything_else_nothing() {
        let id = TenantId::new();
        assert_eq!(TenantRef::parse(&id.to_string()), Some(TenantRef::Id(id)));
        let simple = id.0.simple().to_string();
        assert!(is_slug(&simple), "32 hex digits are slug-shaped too");
        assert_eq!(
            TenantRef::parse(&simple),
            Some(TenantRef::Id(id)),
            "and read as the id"
        );
        assert_eq!(TenantRef::parse("globex"), Some(TenantRef::Slug("globex".into())));
        assert_eq!(TenantRef::parse("a-1"), Some(TenantRef::Slug("a-1".into())));
        for nothing in ["", "Globex", "-acme", "acme_corp", "acme/x", &"a".repeat(64)] {
            assert_eq!(TenantRef::parse(nothing), None, "{nothing}");
        }
    }
}
