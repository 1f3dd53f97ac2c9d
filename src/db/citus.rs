//! Running on Citus: distributing a database migrated before it had the extension, the
//! runtime login roles on the workers, and what `serve` checks there (docs/citus.md). Citus
//! creates on its workers the roles it saw created and those its distributed tables are
//! granted to (`channel_bridge_app`), never a login role made before the extension: without
//! it on the workers, every worker connection of the runtime role fails.

use std::sync::OnceLock;

use anyhow::Context;
use serde::Serialize;
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};

use super::pool::connect_options;
use super::{schema, APP_ROLE};
use crate::settings::DatabaseSettings;

/// Asked once per process. A few hot statements have two shapes: one statement across the
/// tenant tables and the queue on PostgreSQL, statements routed to one shard on Citus.
pub(crate) async fn on_citus(conn: &mut sqlx::PgConnection) -> Result<bool, sqlx::Error> {
    static CITUS: OnceLock<bool> = OnceLock::new();
    if let Some(known) = CITUS.get() {
        return Ok(*known);
    }
    let citus: bool =
        sqlx::query_scalar("select exists (select 1 from pg_extension where extname = 'citus')")
            .fetch_one(conn)
            .await?;
    Ok(*CITUS.get_or_init(|| citus))
}

/// What `channel-bridge citus distribute` did.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Distribution {
    /// `channel_bridge_distribute()`'s answer: the tables it distributed, or that it had none.
    pub result: String,
    /// The login members of `channel_bridge_app`, now on every worker with the coordinator's
    /// password verifier and the membership.
    pub login_roles: Vec<String>,
}

/// `channel_bridge_distribute()` (migration 22), then the login roles on the workers. Runs as
/// the schema owner; safe to repeat.
pub async fn distribute(settings: &DatabaseSettings) -> anyhow::Result<Distribution> {
    let mut conn = connect_options(&settings.url)?
        .connect()
        .await
        .context("Failed to connect to PostgreSQL as the schema owner")?;
    let schema = schema(&mut conn)
        .await
        .context("Failed to read the schema version")?;
    if !schema.is_current() {
        anyhow::bail!("{schema}: run `channel-bridge migrate` first");
    }
    let mut tx = conn.begin().await.context("Failed to begin")?;
    let result: String = sqlx::query_scalar("select channel_bridge_distribute()")
        .fetch_one(&mut *tx)
        .await
        .context("Failed to distribute the tables")?;
    tx.commit().await.context("Failed to commit the distribution")?;
    let login_roles = carry_login_roles(&mut conn).await?;
    Ok(Distribution { result, login_roles })
}

/// Each login member of the app role (a superuser is on every node already) created on every
/// worker, or brought up to date there, with the coordinator's password verifier, inheritance
/// and membership. Built on the coordinator, so the verifier never reaches this process (an
/// error's first line comes back, the verifier masked); the worker's statement holds it only
/// in variables, and the worker logs no failed statement. DDL propagation is off there: the
/// worker would carry the role back to the coordinator, which waits on it (a distributed
/// deadlock). A role Citus creates at the same moment (from another database) makes the
/// `CREATE ROLE` or the `GRANT` a duplicate: the role is then brought up to date instead.
const CARRY_LOGIN_MEMBERS: &str = "
select r.rolname::text, w.nodename || ':' || w.nodeport, w.success,
       coalesce(replace(split_part(w.result, E'\\n', 1), coalesce(r.rolpassword, E'\\n'), '****'), '')
  from pg_authid r
 cross join lateral (select case when r.rolinherit then 'INHERIT' else 'NOINHERIT' end) i(inherit)
 cross join lateral (select
        format('CREATE ROLE %I LOGIN %s PASSWORD %L', r.rolname, i.inherit, r.rolpassword),
        format('ALTER ROLE %I LOGIN %s PASSWORD %L', r.rolname, i.inherit, r.rolpassword),
        format('GRANT %I TO %I', $1::text, r.rolname)) s(create_role, alter_role, grant_app)
 cross join lateral run_command_on_workers(format('DO %L', format($body$
DECLARE
    create_role text := %L;
    alter_role text := %L;
BEGIN
    SET LOCAL log_min_error_statement TO panic;
    SET LOCAL citus.enable_ddl_propagation TO off;
    BEGIN
        PERFORM worker_create_or_alter_role(%L, create_role, alter_role);
        EXECUTE %L;
    EXCEPTION WHEN unique_violation OR duplicate_object THEN
        PERFORM worker_create_or_alter_role(%L, NULL, alter_role);
        EXECUTE %L;
    END;
END $body$, s.create_role, s.alter_role, r.rolname, s.grant_app, r.rolname, s.grant_app))) w
 where r.rolcanlogin and not r.rolsuper and pg_has_role(r.oid, $1, 'MEMBER')
 order by 1, 2";

/// Which login members of the app role each worker lacks (as a login member): what a
/// session that cannot read the verifiers (no superuser) can still find out.
const MISSING_LOGIN_MEMBERS: &str = "
select r.rolname::text, w.nodename || ':' || w.nodeport, coalesce(w.success and w.result = '1', false),
       coalesce(split_part(w.result, E'\\n', 1), '')
  from pg_roles r
 cross join lateral run_command_on_workers(format(
        'SELECT count(*) FROM pg_roles WHERE rolname = %L AND rolcanlogin
            AND pg_has_role(oid, %L, ''MEMBER'')', r.rolname, $1)) w
 where r.rolcanlogin and not r.rolsuper and pg_has_role(r.oid, $1, 'MEMBER')
 order by 1, 2";

/// One login role on one worker: (role, `host:port`, done, the worker's answer's first line).
type OnWorker = (String, String, bool, String);

/// Makes every login member of `channel_bridge_app` a login member on every worker too; names
/// the roles. Without Citus, none.
async fn carry_login_roles(conn: &mut PgConnection) -> anyhow::Result<Vec<String>> {
    let (citus, superuser): (bool, bool) = sqlx::query_as(
        "select exists (select 1 from pg_extension where extname = 'citus'),
                (select rolsuper from pg_roles where rolname = current_user)",
    )
    .fetch_one(&mut *conn)
    .await
    .context("Failed to read whether Citus is installed")?;
    if !citus {
        return Ok(Vec::new());
    }
    let statement = if superuser {
        CARRY_LOGIN_MEMBERS
    } else {
        MISSING_LOGIN_MEMBERS
    };
    let outcomes: Vec<OnWorker> = sqlx::query_as(statement)
        .bind(APP_ROLE)
        .fetch_all(&mut *conn)
        .await
        .context("Failed to carry the login roles to the workers")?;
    let faults = faults(&outcomes);
    match (faults.is_empty(), superuser) {
        (true, _) => Ok(roles(&outcomes)),
        (false, true) => anyhow::bail!(
            "the tables are distributed, but not every login role that is a member of \
             channel_bridge_app reached every worker: {}",
            faults.join("; ")
        ),
        (false, false) => anyhow::bail!(
            "the tables are distributed, but these login roles that are members of \
             channel_bridge_app are missing on workers: {}. Copying a role with its password \
             reads its verifier, which needs a superuser: run `channel-bridge citus distribute` \
             again with a superuser's DATABASE_URL (docs/citus.md, \"Adding Citus to an \
             existing database\")",
            faults.join("; ")
        ),
    }
}

/// The roles, once each, in order.
fn roles(outcomes: &[OnWorker]) -> Vec<String> {
    let mut roles: Vec<String> = outcomes.iter().map(|o| o.0.clone()).collect();
    roles.dedup();
    roles
}

/// "role on host:port" for each role a worker lacks, with the worker's error if it gave one.
fn faults(outcomes: &[OnWorker]) -> Vec<String> {
    outcomes
        .iter()
        .filter(|(_, _, done, _)| !done)
        .map(|(role, node, _, answer)| {
            if answer.starts_with("ERROR") {
                format!("{role} on {node} ({answer})")
            } else {
                format!("{role} on {node}")
            }
        })
        .collect()
}

/// Citus opens its worker connections as the session's role, so the pool must log in as a
/// runtime role, and that role must reach every worker: one statement over every shard proves it.
pub(super) async fn serve_fault(
    pool: &PgPool,
    settings: &DatabaseSettings,
) -> Result<Option<String>, sqlx::Error> {
    let citus: bool =
        sqlx::query_scalar("select exists (select 1 from pg_extension where extname = 'citus')")
            .fetch_one(pool)
            .await?;
    if !citus {
        return Ok(None);
    }
    if settings.app_url.is_none() {
        return Ok(Some(
            "this is a Citus cluster, whose workers the gateway's role must log in to: set \
             CB_APP_DATABASE_URL to a runtime login role (docs/citus.md)"
                .to_owned(),
        ));
    }
    // Row-level security shows no rows without a tenant; the workers are reached all the same.
    let reached = sqlx::query("select count(*) from channel_connectors")
        .execute(pool)
        .await;
    Ok(reached.err().map(|err| {
        format!(
            "the runtime role of CB_APP_DATABASE_URL cannot reach the Citus workers ({err}): it \
             needs a login on every node (`channel-bridge citus distribute` copies it there) and \
             the coordinator its password, in this database's pg_dist_authinfo or a .pgpass \
             (docs/citus.md)"
        )
    }))
}

/// Says what to do about two faults only Citus causes: its own TLS certificate, which the
/// gateway's TLS library refuses, and its workers refusing `channel_bridge_app`, the role a
/// command without `CB_APP_DATABASE_URL` runs as.
pub fn explain(err: anyhow::Error) -> anyhow::Error {
    let hint = if format!("{err:#}").contains("UnsupportedCertVersion") {
        Some(V1_CERTIFICATE)
    } else if err
        .chain()
        .any(|cause| super::errors::sqlx_error(cause).is_some_and(app_role_refused))
    {
        Some(APP_ROLE_REFUSED)
    } else {
        None
    };
    match hint {
        Some(hint) => anyhow::anyhow!("{hint} ({err:#})"),
        None => err,
    }
}

const V1_CERTIFICATE: &str = "the database server's TLS certificate is X.509 v1, as Citus makes \
    for itself, which the gateway's TLS library refuses: add sslmode=disable to the URL on a \
    trusted network, or give the nodes a v3 certificate (docs/citus.md, \"TLS to the database\")";

const APP_ROLE_REFUSED: &str = "the Citus workers refuse channel_bridge_app, the role this \
    command switches to without CB_APP_DATABASE_URL: set CB_APP_DATABASE_URL to a runtime \
    login role, as for serve (docs/citus.md)";

/// A worker connection Citus could not open (08xxx) for the app role itself.
fn app_role_refused(err: &sqlx::Error) -> bool {
    err.as_database_error().is_some_and(|db| {
        db.code().is_some_and(|code| code.starts_with("08"))
            && db.message().contains(&format!("\"{APP_ROLE}\""))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(role: &str, node: &str, done: bool, answer: &str) -> OnWorker {
        (role.into(), node.into(), done, answer.into())
    }

    #[test]
    fn a_role_missing_on_a_worker_is_named_with_the_worker_and_its_error() {
        let outcomes = [
            on("cb_a", "w1:5432", true, "SET"),
            on(
                "cb_a",
                "w2:5432",
                false,
                "ERROR:  permission denied to create role",
            ),
            on("cb_b", "w1:5432", false, "0"),
        ];
        assert_eq!(
            faults(&outcomes),
            [
                "cb_a on w2:5432 (ERROR:  permission denied to create role)",
                "cb_b on w1:5432"
            ]
        );
        assert_eq!(roles(&outcomes), ["cb_a", "cb_b"]);
    }

    #[test]
    fn citus_own_certificate_is_explained_with_the_tls_section() {
        let refused =
            sqlx::Error::Tls("invalid peer certificate: Other(OtherError(UnsupportedCertVersion))".into());
        let err = anyhow::Error::new(refused).context("cannot connect to DATABASE_URL");
        let explained = format!("{:#}", explain(err));
        assert!(explained.contains("sslmode=disable"), "{explained}");
        assert!(explained.contains("\"TLS to the database\""), "{explained}");
        assert!(
            explained.contains("UnsupportedCertVersion"),
            "the cause stays: {explained}"
        );
    }

    #[test]
    fn other_errors_pass_unchanged() {
        let err = anyhow::anyhow!("tenant 7 not found");
        assert_eq!(format!("{:#}", explain(err)), "tenant 7 not found");
    }
}
