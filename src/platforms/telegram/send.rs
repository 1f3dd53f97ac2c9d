//! Sending a reply part to Telegram (`sendMessage`, core.telegram.org/bots/api#sendmessage), and adopting a live
//! view's group message (`editMessageText`).

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::Telegram;
use crate::choices::Offered;
use crate::db::messages::MessageRow;
use crate::egress::{self, GuardedClient as Client};
use crate::platforms::contract::api_base;
use crate::platforms::send::{read_json, transport_error, OutboundPart, SendOutcome};

/// Telegram chat and message ids are integers; the JSON must carry numbers.
pub(crate) fn json_id(value: &str) -> Value {
    value
        .parse::<i64>()
        .map_or_else(|_| Value::String(value.to_owned()), Value::from)
}

pub(super) async fn send(client: &Client, part: &OutboundPart<'_>, token: &str) -> SendOutcome {
    let Some(formatted) = part.formatted(&Telegram) else {
        return post(client, part, token, part.text, None).await.1;
    };
    let (status, outcome) = post(client, part, token, &formatted.text, formatted.parse_mode).await;
    if status != Some(StatusCode::BAD_REQUEST) {
        return outcome;
    }
    // "can't parse entities" or the like: certainly not posted, so sending the same part as
    // plain text cannot double it.
    // Only the status: Telegram's description may quote the text, which is never logged.
    tracing::warn!("telegram refused a formatted part (400); sending it as plain text");
    post(client, part, token, part.text, None).await.1
}

/// The `sendMessage` body of `text` replying to `message` (in its forum topic, if any; a
/// turn the agent wrote first has no message to reply to).
pub(super) fn reply_body(message: &MessageRow, text: &str) -> Value {
    let mut body = json!({
        "chat_id": json_id(&message.address.chat_id),
        "text": text,
        "link_preview_options": { "is_disabled": true },
    });
    if let Some(target) = message.reply_target() {
        body["reply_parameters"] = json!({
            "message_id": json_id(target),
            "allow_sending_without_reply": true,
        });
    }
    if let Some(topic) = &message.address.thread_id {
        body["message_thread_id"] = json_id(topic);
    }
    body
}

/// Without `parse_mode`, `text` is plain: nothing needs escaping or can become markup.
async fn post(
    client: &Client,
    part: &OutboundPart<'_>,
    token: &str,
    text: &str,
    parse_mode: Option<&str>,
) -> (Option<StatusCode>, SendOutcome) {
    let mut body = reply_body(part.message, text);
    if let Some(mode) = parse_mode {
        body["parse_mode"] = mode.into();
    }
    if let Some(offered) = part.choices {
        body["reply_markup"] = keyboard(offered);
    }
    let request = client
        .post(format!("{}/bot{token}/sendMessage", api_base(part.connector)))
        .json(&body);
    let response = client.send(request).await;
    match response {
        Ok(response) => {
            let (status, body, _) = read_json(response).await;
            (Some(status), classify(status, body))
        }
        Err(err) => (None, transport_error(err)),
    }
}

/// An `inline_keyboard` (core.telegram.org/bots/api#inlinekeyboardmarkup): a reply choice
/// carries its button id as `callback_data`, a link its `url`. A few short labels share a
/// row; otherwise each choice has a row of its own.
pub(super) fn keyboard(offered: &Offered) -> Value {
    let items = &offered.choices.items;
    let buttons = items.iter().enumerate().map(|(index, choice)| {
        let mut button = json!({ "text": choice.label.trim() });
        match &choice.url {
            Some(url) => button["url"] = url.as_str().into(),
            None => button["callback_data"] = offered.button(index).to_string().into(),
        }
        if let Some(style) = choice.style {
            button["style"] = style.as_str().into();
        }
        button
    });
    let one_row = items.len() <= 3 && items.iter().map(|c| c.label.chars().count()).sum::<usize>() <= 30;
    let rows: Vec<Value> = if one_row {
        vec![Value::Array(buttons.collect())]
    } else {
        buttons.map(|button| Value::Array(vec![button])).collect()
    };
    json!({ "inline_keyboard": rows })
}

/// "message is not modified" means it already shows the text (an edit repeated after a
/// crash); "message to edit not found" that it is gone: posted anew.
pub(super) async fn adopt(client: &Client, part: &OutboundPart<'_>, token: &str, id: &str) -> SendOutcome {
    let formatted = part.formatted(&Telegram);
    let first = formatted
        .as_ref()
        .map_or((part.text, None), |f| (f.text.as_str(), f.parse_mode));
    let mut answer = edit(client, part, token, id, first.0, first.1).await;
    if first.1.is_some()
        && matches!(&answer, Edited::Refused(400, d) if !d.contains("not modified") && !d.contains("not found"))
    {
        tracing::warn!("telegram refused a formatted edit (400); editing as plain text");
        answer = edit(client, part, token, id, part.text, None).await;
    }
    match answer {
        Edited::Outcome(outcome) => outcome,
        Edited::Refused(400, description) if description.contains("message is not modified") => {
            SendOutcome::Sent(id.to_owned())
        }
        Edited::Refused(400, description) if description.contains("message to edit not found") => {
            send(client, part, token).await
        }
        Edited::Refused(status, description) => SendOutcome::Permanent {
            error: format!("telegram {status}: {}", egress::short_reason(&description)),
        },
    }
}

enum Edited {
    Outcome(SendOutcome),
    /// A 400 (status and Telegram's description, for the caller to tell apart).
    Refused(u16, String),
}

async fn edit(
    client: &Client,
    part: &OutboundPart<'_>,
    token: &str,
    id: &str,
    text: &str,
    parse_mode: Option<&str>,
) -> Edited {
    let mut body = json!({
        "chat_id": json_id(&part.message.address.chat_id),
        "message_id": json_id(id),
        "text": text,
        "link_preview_options": { "is_disabled": true },
    });
    if let Some(mode) = parse_mode {
        body["parse_mode"] = mode.into();
    }
    // An edit without `reply_markup` would leave the live view's message without buttons.
    if let Some(offered) = part.choices {
        body["reply_markup"] = keyboard(offered);
    }
    let request = client
        .post(format!("{}/bot{token}/editMessageText", api_base(part.connector)))
        .json(&body);
    let (status, body) = match client.send(request).await {
        Ok(response) => {
            let (status, body, _) = read_json(response).await;
            (status, body)
        }
        Err(err) => return Edited::Outcome(transport_error(err)),
    };
    if status == StatusCode::BAD_REQUEST {
        let description = body
            .as_ref()
            .and_then(|b| b["description"].as_str())
            .unwrap_or_default()
            .to_owned();
        return Edited::Refused(400, description);
    }
    match classify_edit(status, body) {
        SendOutcome::Sent(_) => Edited::Outcome(SendOutcome::Sent(id.to_owned())),
        other => Edited::Outcome(other),
    }
}

/// An edit answers the edited Message, or `true` (for an inline message): either is done.
pub(super) fn classify_edit(status: StatusCode, body: Option<Value>) -> SendOutcome {
    match body {
        Some(body) if status.is_success() && body["ok"] == true && body["result"] == true => {
            SendOutcome::Sent(String::new())
        }
        body => classify(status, body),
    }
}

pub(super) fn classify(status: StatusCode, body: Option<Value>) -> SendOutcome {
    // Shortened and cleaned: the base URL may be the tenant's, and its answer is not trusted.
    let description = body
        .as_ref()
        .and_then(|b| b["description"].as_str())
        .map(egress::short_reason)
        .unwrap_or_default();
    let error = format!("telegram {}: {description}", status.as_u16());
    if let Some(id) = body
        .as_ref()
        .filter(|b| b["ok"] == true)
        .and_then(|b| b.pointer("/result/message_id"))
    {
        return SendOutcome::Sent(id.to_string());
    }
    match status.as_u16() {
        429 => {
            let secs = body
                .as_ref()
                .and_then(|b| b.pointer("/parameters/retry_after"))
                .and_then(Value::as_u64);
            SendOutcome::RateLimited {
                retry_after: Duration::from_secs(secs.unwrap_or(1)),
                error,
            }
        }
        // 403: blocked by the user or kicked from the chat; 400/401/404: a request that
        // will never succeed as it is.
        400..=499 => SendOutcome::Permanent { error },
        _ => SendOutcome::Unknown { error },
    }
}

/// Removes the keyboard of `target` (`editMessageReplyMarkup` with an empty one,
/// core.telegram.org/bots/api#editmessagereplymarkup). A 400 (not modified, message gone
/// or no longer editable) leaves nothing to do.
pub(super) async fn close_choices(
    client: &Client,
    part: &OutboundPart<'_>,
    token: &str,
    target: &str,
) -> SendOutcome {
    let body = json!({
        "chat_id": json_id(&part.message.address.chat_id),
        "message_id": json_id(target),
        "reply_markup": { "inline_keyboard": [] },
    });
    let url = format!("{}/bot{token}/editMessageReplyMarkup", api_base(part.connector));
    let response = match client.send(client.post(url).json(&body)).await {
        Ok(response) => response,
        Err(err) => return transport_error(err),
    };
    let (status, body, _) = read_json(response).await;
    if status == StatusCode::BAD_REQUEST {
        tracing::info!("telegram kept the keyboard of a closed choice (400); nothing more to do");
        return SendOutcome::Sent(target.to_owned());
    }
    match classify_edit(status, body) {
        SendOutcome::Sent(_) => SendOutcome::Sent(target.to_owned()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn telegram_answers_are_classified() {
        let ok = json!({"ok": true, "result": {"message_id": 321, "chat": {"id": 1}}});
        assert_eq!(
            classify(StatusCode::OK, Some(ok)),
            SendOutcome::Sent("321".into())
        );
        let limited = json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 15", "parameters": {"retry_after": 15}});
        let outcome = classify(StatusCode::TOO_MANY_REQUESTS, Some(limited));
        assert!(
            matches!(outcome, SendOutcome::RateLimited { retry_after, .. } if retry_after == Duration::from_secs(15))
        );
        let blocked =
            json!({"ok": false, "error_code": 403, "description": "Forbidden: bot was blocked by the user"});
        assert!(matches!(
            classify(StatusCode::FORBIDDEN, Some(blocked)),
            SendOutcome::Permanent { .. }
        ));
        assert!(matches!(
            classify(StatusCode::BAD_GATEWAY, None),
            SendOutcome::Unknown { .. }
        ));
    }

    #[test]
    fn an_edit_answered_true_is_done_not_in_doubt() {
        let inline = json!({"ok": true, "result": true});
        assert!(matches!(
            classify_edit(StatusCode::OK, Some(inline)),
            SendOutcome::Sent(_)
        ));
        let message = json!({"ok": true, "result": {"message_id": 57, "chat": {"id": 1}}});
        assert_eq!(
            classify_edit(StatusCode::OK, Some(message)),
            SendOutcome::Sent("57".into())
        );
        assert!(matches!(
            classify_edit(StatusCode::OK, Some(json!({"ok": true}))),
            SendOutcome::Unknown { .. }
        ));
    }
}
