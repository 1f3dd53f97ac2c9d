//! `send-fixture` against the real application: what the subcommand sends is accepted and
//! recorded, and what it would show an operator with a wrong secret or a stale clock.

use channel_bridge::domain::Platform;
use channel_bridge::send_fixture::{self, GatewayAnswer, Target};

use crate::support::platforms::*;
use crate::support::{spawn_app, TestApp};

fn secret(platform: Platform) -> &'static str {
    match platform {
        Platform::Slack => SLACK_SECRET,
        Platform::Whatsapp => WHATSAPP_SECRET,
        Platform::Telegram => TELEGRAM_SECRET,
    }
}

fn target(app: &TestApp, tenant: &Provisioned, platform: Platform) -> Target {
    Target {
        base_url: app.url("/").parse().expect("app URL parses"),
        tenant: tenant.tenant,
        connector: tenant.connector(platform),
        platform,
    }
}

/// What `channel-bridge send-fixture` does after parsing its arguments.
async fn send(app: &TestApp, target: &Target, secret: &str, fixture_name: &str, now: i64) -> GatewayAnswer {
    let body = fixture(target.platform, fixture_name);
    let request = send_fixture::sign(target, secret, body, now).expect("signs");
    send_fixture::send(&app.client, request)
        .await
        .expect("gateway answers")
}

#[tokio::test]
async fn a_fixture_sent_for_each_platform_is_accepted_and_recorded() {
    let app = spawn_app().await;
    let tenant = provision_tenant(&app.pool, "send-fixture").await;
    let cases = [
        (
            Platform::Slack,
            "dm_text",
            "T0001:D0DM00001:1718000000.000100",
            "alice",
        ),
        (
            Platform::Whatsapp,
            "text",
            "wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA=",
            "bob",
        ),
        (Platform::Telegram, "private_text", "306197398", "alice"),
    ];
    for (platform, name, key, user) in cases {
        let target = target(&app, &tenant, platform);
        let answer = send(&app, &target, secret(platform), name, now()).await;
        assert_eq!(answer.status, 200, "{platform}: {:?}", answer.body);
        assert_eq!(answer.body["queued"], 1, "{platform}: {:?}", answer.body);

        let mut owner = app.db.owner_conn().await;
        let row: (String, String, Option<String>) = sqlx::query_as(
            "select platform, status, user_id from channel_messages
              where tenant_id = $1 and connector_id = $2 and idempotency_key = $3",
        )
        .bind(tenant.tenant)
        .bind(target.connector)
        .bind(key)
        .fetch_one(&mut owner)
        .await
        .expect("the row is recorded");
        assert_eq!(
            row,
            (platform.to_string(), "accepted".into(), Some(user.into())),
            "{platform}"
        );
    }
}

#[tokio::test]
async fn a_wrong_secret_or_a_stale_slack_timestamp_shows_the_gateways_401() {
    let app = spawn_app().await;
    let tenant = provision_tenant(&app.pool, "send-fixture-401").await;
    for platform in Platform::ALL {
        let name = match platform {
            Platform::Slack => "dm_text",
            Platform::Whatsapp => "text",
            Platform::Telegram => "private_text",
        };
        let answer = send(
            &app,
            &target(&app, &tenant, platform),
            "not-the-secret",
            name,
            now(),
        )
        .await;
        assert_eq!(answer.status, 401, "{platform}: {:?}", answer.body);
        assert_eq!(answer.body["error"], "unauthorized", "{platform}");
    }
    let stale = now() - 301;
    let answer = send(
        &app,
        &target(&app, &tenant, Platform::Slack),
        SLACK_SECRET,
        "dm_text",
        stale,
    )
    .await;
    assert_eq!(answer.status, 401, "{:?}", answer.body);
}
