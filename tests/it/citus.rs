//! Running on Citus (issue #16). No Citus cluster is within reach of the test machine (its
//! packages come from Citus's own repository, not Debian's), so the distribution function of
//! migration 22 is checked two ways on plain PostgreSQL:
//! - as it is: a no-op saying Citus is absent, through `channel-bridge citus distribute`;
//! - against stand-ins of `create_reference_table` / `create_distributed_table` that refuse
//!   what Citus refuses about order (a foreign key to a table not distributed yet, a
//!   reference table pointing at a distributed one) and record each call.

use serde_json::Value;
use sqlx::{Connection, Executor, PgConnection};

use crate::support::TestDb;

/// Stand-ins of Citus's functions and catalog in their own schema, put first on the path.
const CITUS_STANDIN: &str = r#"
create schema citus_standin;
create table citus_standin.pg_dist_partition (
    seq serial, logicalrelid regclass primary key, kind text, colocate_with text);

-- Every table `t` references must be distributed or a reference table already; a reference
-- table may reference reference tables only.
create function citus_standin.check_parents(t regclass, reference boolean) returns void
language plpgsql as $$
declare parent record;
begin
    for parent in select c.confrelid::regclass as rel from pg_constraint c
                   where c.conrelid = t and c.contype = 'f' loop
        if not exists (select 1 from citus_standin.pg_dist_partition p
                        where p.logicalrelid = parent.rel
                          and (not reference or p.kind = 'reference')) then
            raise exception 'cannot create foreign key constraint: % references %, not distributed yet',
                t, parent.rel;
        end if;
    end loop;
end $$;

create function citus_standin.create_reference_table(t regclass) returns void
language plpgsql as $$
begin
    perform citus_standin.check_parents(t, true);
    insert into citus_standin.pg_dist_partition (logicalrelid, kind) values (t, 'reference');
end $$;

create function citus_standin.create_distributed_table(
    t regclass, column_name text, colocate_with text default 'default') returns void
language plpgsql as $$
begin
    if column_name <> 'tenant_id' then
        raise exception 'distributed by %', column_name;
    end if;
    perform citus_standin.check_parents(t, false);
    insert into citus_standin.pg_dist_partition (logicalrelid, kind, colocate_with)
    values (t, 'hash', colocate_with);
end $$;
"#;

async fn distribute(owner: &mut PgConnection) -> String {
    let mut tx = owner.begin().await.unwrap();
    tx.execute("set local search_path = citus_standin, public")
        .await
        .unwrap();
    let done: String = sqlx::query_scalar("select channel_bridge_distribute()")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    done
}

#[tokio::test]
async fn with_citus_the_tables_are_distributed_parents_first_and_the_queue_stays_local() {
    let db = TestDb::migrated().await;
    let mut owner = db.owner_conn().await;
    owner.execute(CITUS_STANDIN).await.unwrap();
    // The stand-in refuses a child before its parent, as Citus does.
    let early = sqlx::query("select citus_standin.create_distributed_table('channel_messages', 'tenant_id')")
        .execute(&mut owner)
        .await
        .unwrap_err();
    assert!(early.to_string().contains("not distributed yet"), "{early}");

    let done = distribute(&mut owner).await;
    assert!(done.starts_with("distributed: "), "{done}");
    let calls: Vec<(String, String, Option<String>)> = sqlx::query_as(
        "select logicalrelid::text, kind, colocate_with from citus_standin.pg_dist_partition order by seq",
    )
    .fetch_all(&mut owner)
    .await
    .unwrap();
    let tables: Vec<&str> = calls.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(&tables[..2], ["tenants", "api_keys"], "reference tables first");
    assert!(calls[..2].iter().all(|c| c.1 == "reference"));
    assert_eq!(
        &tables[2..8],
        [
            "channel_connectors",
            "channel_links",
            "channel_messages",
            "channel_replies",
            "channel_notices",
            "slack_read_budget"
        ]
    );
    assert!(
        !tables.contains(&"dispatch_queue"),
        "the queue stays on the coordinator"
    );
    assert_eq!(calls[2].2.as_deref(), Some("default"));
    assert!(
        calls[3..]
            .iter()
            .all(|c| c.1 == "hash" && c.2.as_deref() == Some("channel_connectors")),
        "co-located: {calls:?}"
    );
    // Every table with tenant data and RLS is distributed, including later migrations'.
    let undistributed: Vec<String> = sqlx::query_scalar(
        "select c.relname::text from pg_class c join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = 'public' and c.relkind = 'r' and c.relrowsecurity
            and c.oid not in (select logicalrelid from citus_standin.pg_dist_partition)",
    )
    .fetch_all(&mut owner)
    .await
    .unwrap();
    assert!(undistributed.is_empty(), "{undistributed:?}");

    assert_eq!(distribute(&mut owner).await, "already distributed");
}

#[tokio::test]
async fn on_plain_postgresql_distributing_does_nothing_and_the_queue_has_no_key_to_tenants() {
    let db = TestDb::migrated().await;
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_channel-bridge"))
        .args(["citus", "distribute"])
        .env("DATABASE_URL", db.url())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        answer["result"].as_str().unwrap().contains("not installed"),
        "{answer}"
    );
    let mut owner = db.owner_conn().await;
    let keys: i64 = sqlx::query_scalar(
        "select count(*) from pg_constraint where conrelid = 'dispatch_queue'::regclass and contype = 'f'",
    )
    .fetch_one(&mut owner)
    .await
    .unwrap();
    assert_eq!(keys, 0);
}
