//! `tenants`: infrastructure rows (no RLS), read by id or slug. Dispatch secrets are stored
//! sealed (`crate::secrets`) and opened as a row is read.

use base64::Engine;
use rand::RngCore;
use secrecy::{ExposeSecret, SecretString};
use sqlx::PgConnection;

use crate::domain::{HistoryScopeSetting, TenantId};
use crate::secrets::{Binding, Keyring, SecretError};

/// A tenant, its dispatch secrets opened.
#[derive(Debug, Clone)]
pub struct TenantRow {
    pub id: TenantId,
    pub slug: String,
    pub name: String,
    pub agent_url: Option<String>,
    pub dispatch_secret: DispatchSecret,
    /// The secret replaced by the last rotation, while it is still honoured.
    pub previous_dispatch_secret: Option<SecretString>,
    /// Most jobs of this tenant one instance keeps in flight (`None`: the instance default).
    pub max_in_flight: Option<i32>,
    /// Which earlier turns the agent sees with a new one.
    pub history_scope: HistoryScopeSetting,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

/// A tenant as stored: its dispatch secrets sealed (`crate::secrets`).
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
    created_at: chrono::DateTime<chrono::Utc>,
}

impl StoredTenant {
    fn open(self, keys: &Keyring) -> Result<TenantRow, sqlx::Error> {
        let binding = Binding::dispatch(self.id);
        // The clock is read here rather than by `now()` in the statement: Citus refuses a
        // non-immutable function in the RETURNING of an update.
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
            created_at: self.created_at,
        })
    }
}

/// A stored secret that does not open: a database error to the caller, which the HTTP
/// layer answers 503 and the worker retries (the operator fixes `CB_SECRETS_KEY`).
pub fn unopened(err: SecretError) -> sqlx::Error {
    sqlx::Error::Decode(Box::new(err))
}

const COLUMNS: &str = "id, slug, name, agent_url, dispatch_secret, previous_dispatch_secret,
    previous_dispatch_secret_expires_at, max_in_flight, history_scope, created_at";

/// A Standard Webhooks signing secret, `whsec_<base64 of 32 random bytes>`; the HMAC key
/// is the decoded bytes, so agents can verify with any Standard Webhooks library.
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

/// Inserts a tenant with a new dispatch secret. A taken slug is `tenants_slug_key`.
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

/// The tenant's history scope alone (no secrets opened); `None` for an unknown tenant.
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

/// What a tenant admin may change of their tenant; `None` keeps a field.
#[derive(Debug, Default, Clone, Copy)]
pub struct TenantChange<'a> {
    pub name: Option<&'a str>,
    /// `Some("")` clears it, falling back to CB_AGENT_URL.
    pub agent_url: Option<&'a str>,
    pub history_scope: Option<HistoryScopeSetting>,
}

/// Applies `change`; `None` for an unknown tenant.
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
                updated_at = now()
          where id = $1 returning {COLUMNS}"
    ))
    .bind(id)
    .bind(change.name)
    .bind(change.agent_url)
    .bind(change.history_scope.map(HistoryScopeSetting::as_str))
    .fetch_optional(conn)
    .await?;
    stored.map(|t| t.open(keys)).transpose()
}

/// Sets the most jobs of this tenant one instance keeps in flight (`None`: the instance
/// default). The operator's to set, never the tenant's.
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
