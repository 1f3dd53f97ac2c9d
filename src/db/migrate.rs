//! Migrations, applied as the owner, the database created first when missing.

use anyhow::Context;
use secrecy::ExposeSecret;
use sqlx::migrate::MigrateDatabase;
use sqlx::{ConnectOptions, Executor, Postgres};

use super::pool::connect_options;
use crate::settings::DatabaseSettings;

pub(super) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

#[derive(Debug, Clone, serde::Serialize, PartialEq, Eq)]
pub struct MigrateReport {
    pub database_created: bool,
    pub applied: Vec<i64>,
}

/// Creates the database when missing, then applies pending migrations as the owner.
pub async fn migrate(settings: &DatabaseSettings) -> anyhow::Result<MigrateReport> {
    let url = settings.url.expose_secret();
    let masked = masked_url(url);
    let exists = Postgres::database_exists(url).await.map_err(|err| {
        anyhow::anyhow!(
            "cannot reach PostgreSQL at DATABASE_URL={masked}: {}",
            cause(&err)
        )
    })?;
    if !exists {
        Postgres::create_database(url).await.map_err(|err| {
            anyhow::anyhow!(
                "cannot create the database of DATABASE_URL={masked}: {}",
                cause(&err)
            )
        })?;
    }
    let mut conn = connect_options(&settings.url)?
        .connect()
        .await
        .map_err(|err| anyhow::anyhow!("cannot connect to DATABASE_URL={masked}: {}", cause(&err)))?;
    let before = applied_versions(&mut conn).await?;
    if !before.is_empty() {
        accept_reworded(&mut conn).await?;
    }
    MIGRATOR
        .run(&mut conn)
        .await
        .context("Failed to apply migrations")?;
    let after = applied_versions(&mut conn).await?;
    let applied: Vec<i64> = after.into_iter().filter(|v| !before.contains(v)).collect();
    if !applied.is_empty() {
        // Statistics now, rather than whenever autovacuum comes (it may be off or late):
        // plans made before them are kept by the gateway's prepared statements.
        conn.execute("analyze")
            .await
            .context("Failed to analyze the migrated tables")?;
    }
    Ok(MigrateReport {
        database_created: !exists,
        applied,
    })
}

/// Migrations whose comments were reworded after they were applied (no statement changed,
/// checked when they were): by version, the SHA-384 a database recorded for the old text.
/// sqlx refuses to run once an applied migration's checksum differs from its file's.
const REWORDED: &[(i64, &str)] = &[
    (
        20261122000005,
        "0bbbaad2bb4673849eef5f90dc96ea156eec325471fd8bcd96db058ce584ac0860c9b2430da5663966f193c1bb1db641",
    ),
    (
        20261122000006,
        "ef3d262eb693eb55afa97ff05b48d01afbb51893355c7fab1a6837166591fc347876c6835b6784f090e286dde5bfcf0a",
    ),
    (
        20261122000008,
        "a1137857a7a1e86b52ac4be95a67ffec4430295ba119117b09a9639816ac916c37ea2dfa0b9e4a5d0fe2ff18795fa8cf",
    ),
    (
        20261122000011,
        "d52eece57e65c91c118e383c6627671f165b973ce056c453baf4545877160e717dc90152ad3a0dc001556e6370fd96f5",
    ),
    (
        20261122000014,
        "468b6a25ca75cba6f76ab6199203c5a69385b496f17e878e2396e654006ed4b316b7a0533999b1cdca1ea2488606e327",
    ),
    (
        20261122000016,
        "690ddf6c30048bec5bfe3ef08db124c47f29d7fc6a782b3340a9e21ae1fe5e5f4edac968e56ebff2d21468aa542d1fa5",
    ),
    (
        20261122000017,
        "f55eb93c4827e45203a53018876989ce26591c6ae876dd74d5782cb41b4ed613330a063229b8881cd330027055a002fd",
    ),
    (
        20261122000018,
        "bc034e6237c31e04dcaad19bf12c58daf06f61863d3c0bacf90ace4e0df930081b5a539089be1ad7fa60f5857cf7f280",
    ),
    (
        20261122000019,
        "d89e814ad98c4d1b1b57893726493c884ca9ee6e472aeb05b507c03620c5e1f594427741bc887059438c2c85ee23d62e",
    ),
    (
        20261122000020,
        "9e4e64138a9ab676fe9f7850b910f23909b0699884fbedcfc643355c04dba4dbc8627a1ac53352efede7f7aa016055a9",
    ),
    (
        20261122000021,
        "39bd9c8134eede6388f263a9f5c4f10a0d55f02e854002185b1439626f3e2af502d971d7102eab9e4ea9df5756f7e0a0",
    ),
    (
        20261122000022,
        "bea76bd80e588b0528e64414e59ab4332e2ebf8965dd85fcc1418ba9e60e9ef0b7a39c9ed365d1ae64bcf45442e9b188",
    ),
    (
        20261122000023,
        "29e6bfb26c63030a4ae7711ac64f09cd6f586951283ce9efbbb6e2b60a98d309c5fe455dcc82dc71f96ecf3baee09751",
    ),
    (
        20261122000024,
        "09bc663fe551ff53fbeb12588b507ef1ee2291d3b7c35c9740bed76076f2a43df950a746790ac16461c2db43550abac7",
    ),
    (
        20261122000027,
        "87faf3d6be35425512d3567cb418023153f6e676b676ef4e4ae7d4364ecfd2f6d570ebac19e28c106f36e7d55dd2e799",
    ),
    (
        20261122000028,
        "23e158743e0f05f12503a1001d1ddb9e77a4060af00ac6e1df6188e7118d88ef370f506f115fdccde779c84fb72111fc",
    ),
    (
        20261122000033,
        "c6309a8f11b0f5c9f31e2b13e8bbcd5cb4d4869084da971b0e1468765fcbbf944c20ffb93848055b08ef1bde0b5571b0",
    ),
    (
        20261122000034,
        "2f41c2b46a9dfb693b00f050278c1b3100c84db5253ad23728428fe59c2eb7eda7d646b539e5dc0752075aba56030eaa",
    ),
    (
        20261122000035,
        "fd830341fe14e245da3c2219866b179a0f995c7653ce38f20a2d8853ebf8f943b72517e6b559dcb6dc657b5a22353681",
    ),
    (
        20261122000036,
        "7ba21ee394b8d50ba10e06f333d291330467ef037cf1da999c5376e9b042fd5cc88182b48147bce9468ba61c0efd4b81",
    ),
];

/// Records the file's checksum over a reworded migration's old one, and only over that: any
/// other difference between a file and what was applied is still refused by sqlx.
async fn accept_reworded(conn: &mut sqlx::PgConnection) -> anyhow::Result<()> {
    let mut versions = Vec::with_capacity(REWORDED.len());
    let mut old = Vec::with_capacity(REWORDED.len());
    let mut new = Vec::with_capacity(REWORDED.len());
    for (version, old_hex) in REWORDED {
        let migration = MIGRATOR.iter().find(|m| m.version == *version);
        let Some(migration) = migration else { continue };
        versions.push(*version);
        old.push(*old_hex);
        new.push(migration.checksum.to_vec());
    }
    sqlx::query(
        "update _sqlx_migrations m set checksum = r.new
           from unnest($1::bigint[], $2::text[], $3::bytea[]) as r(version, old, new)
          where m.version = r.version and m.checksum = decode(r.old, 'hex')",
    )
    .bind(&versions)
    .bind(&old)
    .bind(&new)
    .execute(&mut *conn)
    .await
    .context("Failed to record the reworded migrations' checksums")?;
    Ok(())
}

async fn applied_versions(conn: &mut sqlx::PgConnection) -> anyhow::Result<Vec<i64>> {
    let table: Option<String> = sqlx::query_scalar("select to_regclass('_sqlx_migrations')::text")
        .fetch_one(&mut *conn)
        .await?;
    if table.is_none() {
        return Ok(Vec::new());
    }
    let versions = sqlx::query_scalar("select version from _sqlx_migrations where success order by version")
        .fetch_all(&mut *conn)
        .await?;
    Ok(versions)
}

pub fn masked_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("****"));
            parsed.to_string()
        }
        Ok(parsed) => parsed.to_string(),
        Err(_) => "(not a valid URL)".to_owned(),
    }
}

/// A database error's own message, without sqlx's wrapping.
fn cause(err: &sqlx::Error) -> String {
    match err.as_database_error() {
        Some(db) => db.message().to_owned(),
        None => err.to_string(),
    }
}
