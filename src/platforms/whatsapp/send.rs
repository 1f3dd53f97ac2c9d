//! Sending a reply part to WhatsApp (Cloud API `POST /{phone-number-id}/messages`,
//! <https://developers.facebook.com/docs/whatsapp/cloud-api/guides/send-messages>), with the
//! part key as `biz_opaque_callback_data` so the status callback can settle a send in doubt.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{Whatsapp, GRAPH_VERSION};
use crate::egress::{self, GuardedClient as Client};
use crate::platforms::contract::api_base;
use crate::platforms::send::{read_json, transport_error, OutboundPart, SendOutcome};

/// Meta error codes that mean "slow down": throughput 130429, pair rate 131056 (one message
/// per 6 s to the same user), app/WABA limits 4 and 80007
/// (<https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes>).
pub(crate) fn rate_limit(code: i64) -> Option<Duration> {
    match code {
        131056 => Some(Duration::from_secs(6)),
        130429 | 4 | 80007 => Some(Duration::from_secs(2)),
        _ => None,
    }
}

pub(super) async fn send(client: &Client, part: &OutboundPart<'_>, token: &str) -> SendOutcome {
    let phone_number_id = match phone_number_id(part) {
        Ok(id) => id,
        Err(outcome) => return outcome,
    };
    let formatted = part.formatted(&Whatsapp);
    let text = formatted.as_ref().map_or(part.text, |f| f.text.as_str());
    // Outside the 24-hour window, an approved template (docs/agent.md#writing-first).
    let (kind, object) = match (template_of(part.message), part.choices) {
        (Some(template), _) => ("template", template),
        (None, Some(offered)) => super::choices::message(offered, text),
        (None, None) => ("text", json!({ "preview_url": false, "body": text })),
    };
    let mut body = envelope(part, kind);
    body[kind] = object;
    match post_message(client, part, token, phone_number_id, &body).await {
        Ok((status, answer)) => classify(status, answer),
        Err(outcome) => outcome,
    }
}

/// The number the connector sends from: the one the user wrote to, else the connector's.
pub(super) fn phone_number_id<'a>(part: &'a OutboundPart<'_>) -> Result<&'a str, SendOutcome> {
    part.message.metadata["phone_number_id"]
        .as_str()
        .or(part.connector.profile.external_id.as_deref())
        .ok_or_else(|| SendOutcome::Permanent {
            error: "connector has no phone_number_id (external id)".into(),
        })
}

/// A `/messages` send of `part` as every kind of message addresses it: to the user's number
/// with its `+` (without it Meta prepends the business number's country code), quoting the
/// user's message, and with the part key Meta echoes in the status callback that settles a
/// send in doubt. `kind`'s own object is the caller's.
pub(super) fn envelope(part: &OutboundPart<'_>, kind: &str) -> Value {
    let mut body = json!({
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": recipient(part.message),
        "type": kind,
        "biz_opaque_callback_data": part.part_key,
    });
    if let Some(target) = part.message.reply_target() {
        body["context"] = json!({ "message_id": target });
    }
    body
}

pub(super) fn recipient(message: &crate::db::messages::MessageRow) -> String {
    format!("+{}", message.address.chat_id.trim_start_matches('+'))
}

/// POSTs `body` to the number's `/messages`: Meta's answer, or what the failed request means.
pub(super) async fn post_message(
    client: &Client,
    part: &OutboundPart<'_>,
    token: &str,
    phone_number_id: &str,
    body: &Value,
) -> Result<(StatusCode, Option<Value>), SendOutcome> {
    let url = format!(
        "{}/{GRAPH_VERSION}/{phone_number_id}/messages",
        api_base(part.connector)
    );
    let request = client.post(url).bearer_auth(token).json(body);
    match client.send(request).await {
        Ok(response) => {
            let (status, answer, _) = read_json(response).await;
            Ok((status, answer))
        }
        Err(err) => Err(transport_error(err)),
    }
}

/// `metadata.template` of a turn the agent wrote first (`{name, language, parameters}`),
/// as Cloud API's `template` object: the body's text parameters in order.
fn template_of(message: &crate::db::messages::MessageRow) -> Option<Value> {
    let template = message.metadata.get("template")?;
    let name = template.get("name")?.as_str()?;
    let language = template.get("language")?.as_str()?;
    let parameters: Vec<Value> = template
        .get("parameters")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .map(|text| json!({"type": "text", "text": text}))
                .collect()
        })
        .unwrap_or_default();
    let mut out = json!({ "name": name, "language": { "code": language } });
    if !parameters.is_empty() {
        out["components"] = json!([{ "type": "body", "parameters": parameters }]);
    }
    Some(out)
}

/// A `/messages` answer: the new message's wamid, or Meta's error as `refusal` reads it.
pub(super) fn classify(status: StatusCode, body: Option<Value>) -> SendOutcome {
    match body
        .as_ref()
        .and_then(|b| b.pointer("/messages/0/id"))
        .and_then(Value::as_str)
    {
        Some(id) => SendOutcome::Sent(id.to_owned()),
        None => refusal(status, body.as_ref()),
    }
}

/// A Graph error answer of any WhatsApp call. The HTTP status varies; Meta's error table is
/// keyed by `error.code` (see `rate_limit`): 1 and 2 (and a 5xx) may have done the work.
pub(super) fn refusal(status: StatusCode, body: Option<&Value>) -> SendOutcome {
    let code = body
        .and_then(|b| b.pointer("/error/code"))
        .and_then(Value::as_i64);
    let text = body
        .and_then(|b| b.pointer("/error/message"))
        .and_then(Value::as_str)
        .map(egress::short_reason)
        .unwrap_or_default();
    match code {
        Some(code) => {
            let error = format!("whatsapp {code}: {text}");
            match rate_limit(code) {
                Some(retry_after) => SendOutcome::RateLimited { retry_after, error },
                None if status.is_server_error() || code == 1 || code == 2 => SendOutcome::Unknown { error },
                None => SendOutcome::Permanent { error },
            }
        }
        None => SendOutcome::Unknown {
            error: format!("whatsapp answered {status} without an error code"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whatsapp_answers_are_classified_by_error_code() {
        let ok = json!({"messaging_product": "whatsapp", "contacts": [{"input": "+1", "wa_id": "1"}], "messages": [{"id": "wamid.OUT"}]});
        assert_eq!(
            classify(StatusCode::OK, Some(ok)),
            SendOutcome::Sent("wamid.OUT".into())
        );
        let pair = json!({"error": {"message": "pair rate limit", "code": 131056}});
        assert!(matches!(
            classify(StatusCode::BAD_REQUEST, Some(pair)),
            SendOutcome::RateLimited { .. }
        ));
        let window = json!({"error": {"message": "Re-engagement message", "code": 131047}});
        assert_eq!(
            classify(StatusCode::BAD_REQUEST, Some(window)),
            SendOutcome::Permanent {
                error: "whatsapp 131047: Re-engagement message".into()
            }
        );
        let expired = json!({"error": {"message": "Session has expired", "code": 190}});
        assert!(matches!(
            classify(StatusCode::UNAUTHORIZED, Some(expired)),
            SendOutcome::Permanent { .. }
        ));
        assert!(matches!(
            classify(StatusCode::INTERNAL_SERVER_ERROR, None),
            SendOutcome::Unknown { .. }
        ));
    }
}
