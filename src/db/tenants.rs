//! `tenants`: infrastructure rows (no RLS), read by id or slug.

use base64::Engine;
use rand::RngCore;
use secrecy::SecretString;
use sqlx::PgConnection;

use crate::domain::TenantId;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TenantRow {
    pub id: TenantId,
    pub slug: String,
    pub name: String,
    pub agent_url: Option<String>,
    #[sqlx(try_from = "String")]
    pub dispatch_secret: DispatchSecret,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

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

impl From<String> for DispatchSecret {
    fn from(value: String) -> Self {
        Self(SecretString::from(value))
    }
}

pub struct NewTenant<'a> {
    pub slug: &'a str,
    pub name: &'a str,
    pub agent_url: Option<&'a str>,
}

/// Inserts a tenant with a new dispatch secret. A taken slug is `tenants_slug_key`.
pub async fn insert(conn: &mut PgConnection, new: &NewTenant<'_>) -> Result<TenantRow, sqlx::Error> {
    use secrecy::ExposeSecret;
    let secret = DispatchSecret::generate();
    sqlx::query_as(
        "insert into tenants (id, slug, name, agent_url, dispatch_secret)
         values ($1, $2, $3, $4, $5)
         returning id, slug, name, agent_url, dispatch_secret, created_at",
    )
    .bind(TenantId::new())
    .bind(new.slug)
    .bind(new.name)
    .bind(new.agent_url)
    .bind(secret.0.expose_secret())
    .fetch_one(conn)
    .await
}

pub async fn get(conn: &mut PgConnection, id: TenantId) -> Result<Option<TenantRow>, sqlx::Error> {
    sqlx::query_as("select id, slug, name, agent_url, dispatch_secret, created_at from tenants where id = $1")
        .bind(id)
        .fetch_optional(conn)
        .await
}
