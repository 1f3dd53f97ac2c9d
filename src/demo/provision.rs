//! The demo tenant. Its connectors know the fixtures' bot identities: that is what lets the
//! gateway recognise and drop Slack's echo of our own reply.

use secrecy::SecretString;
use sqlx::PgPool;

use super::webhooks::*;
use crate::domain::{ConnectorId, Platform, TenantId, UnlinkedPolicy};
use crate::shapes::{ConnectorSettings, NewConnector, SecretsIn};

pub(super) async fn provision(
    pool: &PgPool,
    keys: &crate::secrets::Keyring,
    agent_url: &str,
    platforms_url: &str,
) -> anyhow::Result<(TenantId, String, Vec<(Platform, ConnectorId)>)> {
    use crate::provision::{add_connector, add_link, create_tenant};
    let created = create_tenant(pool, keys, "demo", "Demo tenant", Some(agent_url)).await?;
    let tenant = created.tenant_id;
    let mut connectors = Vec::new();
    for platform in [Platform::Slack, Platform::Whatsapp, Platform::Telegram] {
        let new = demo_connector(platform, platforms_url);
        connectors.push((
            platform,
            add_connector(pool, keys, tenant, &new).await?.connector_id,
        ));
    }
    for (platform, sender, user) in [
        (Platform::Slack, SLACK_ALICE, "alice"),
        (Platform::Telegram, TELEGRAM_ALICE, "alice"),
        (Platform::Whatsapp, WHATSAPP_BOB, "bob"),
    ] {
        add_link(pool, tenant, platform, sender, user).await?;
    }
    Ok((tenant, created.dispatch_secret, connectors))
}

fn demo_connector(platform: Platform, platforms_url: &str) -> NewConnector {
    let secret = |s: &str| Some(SecretString::from(s.to_owned()));
    let (verification, external_id, bot_user_id, token) = match platform {
        Platform::Slack => (
            SLACK_SIGNING_SECRET,
            SLACK_TEAM,
            Some(SLACK_BOT_USER),
            "xoxb-demo-token",
        ),
        Platform::Whatsapp => (
            WHATSAPP_APP_SECRET,
            WHATSAPP_PHONE_NUMBER_ID,
            None,
            "demo-whatsapp-access-token",
        ),
        Platform::Telegram => (
            TELEGRAM_SECRET_TOKEN,
            TELEGRAM_BOT,
            Some(TELEGRAM_BOT),
            "7000000001:demo-telegram-bot-token",
        ),
    };
    NewConnector {
        platform,
        secrets: SecretsIn {
            verification_secret: secret(verification),
            verify_token: if platform == Platform::Whatsapp {
                secret("demo-verify-token")
            } else {
                None
            },
            outbound_token: secret(token),
        },
        settings: ConnectorSettings {
            name: Some(format!("demo {platform}")),
            external_id: Some(external_id.into()),
            app_id: (platform == Platform::Slack).then(|| SLACK_APP.into()),
            bot_user_id: bot_user_id.map(Into::into),
            bot_id: (platform == Platform::Slack).then(|| SLACK_BOT_ID.into()),
            api_base_url: Some(platforms_url.to_owned()),
            unlinked_policy: Some(UnlinkedPolicy::Deny),
            ..ConnectorSettings::default()
        },
    }
}
