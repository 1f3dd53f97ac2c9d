//! What the OpenAPI document says of the values the API takes: text limits, enums built from
//! the domain types (so it cannot list a value the parser refuses), JSON Schema's integers.
//! `#[schema(max_length)]` takes literals only, so the contract test tries each limit.

use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
use utoipa::openapi::{Object, Schema};

use crate::domain::{MessageStatus, PartStatus, Platform, TelegramDelivery, UnlinkedPolicy};

/// Connector, tenant and key names.
pub const NAME_MAX: usize = 200;
/// Platform, user and Slack workspace ids: indexed, and far longer than any platform's.
pub const ID_MAX: usize = 256;
/// Agent and API base URLs.
pub const URL_MAX: usize = 2048;
/// Verification secrets, verify tokens and bot tokens.
pub const SECRET_MAX: usize = 1024;
/// The notice posted to an unlinked sender: Telegram's and WhatsApp's message limit.
pub const NOTICE_MAX: usize = 4096;
/// The listing's text search.
pub const SEARCH_MAX: usize = 500;

/// `the_status_lists_are_whole` stops compiling when a domain status is missing here.
pub const MESSAGE_STATUSES: [MessageStatus; 7] = [
    MessageStatus::Accepted,
    MessageStatus::Dispatching,
    MessageStatus::Executed,
    MessageStatus::DeliveryFailed,
    MessageStatus::DispatchFailed,
    MessageStatus::DeniedUnlinked,
    MessageStatus::Ignored,
];

pub const PART_STATUSES: [PartStatus; 5] = [
    PartStatus::Pending,
    PartStatus::Sending,
    PartStatus::Sent,
    PartStatus::Failed,
    PartStatus::Unknown,
];

/// Set by ingress (`ignore_non_text`, `deny_unlinked`) and by the worker (the others).
pub const DECISIONS: [&str; 5] = [
    "respond",
    "no_reply",
    "dispatch_failed",
    "deny_unlinked",
    "ignore_non_text",
];

/// `deserialize_with` of an optional integer field: JSON Schema's `integer` is any number
/// without a fractional part, so `100.0` is one, which serde's integers refuse.
pub fn optional_integer<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64> + TryFrom<u64>,
{
    use serde::de::Error;
    use serde::Deserialize;
    let Some(number) = Option::<serde_json::Number>::deserialize(deserializer)? else {
        return Ok(None);
    };
    let out_of_range = || D::Error::custom(format!("integer {number} out of range"));
    if let Some(n) = number.as_u64() {
        return T::try_from(n).map(Some).map_err(|_| out_of_range());
    }
    if let Some(n) = number.as_i64() {
        return T::try_from(n).map(Some).map_err(|_| out_of_range());
    }
    match number.as_f64() {
        // Exactly integral and within i64 (2^63 is the first f64 past it).
        Some(f) if f.fract() == 0.0 && f.abs() < 9_223_372_036_854_775_808.0 => {
            T::try_from(f as i64).map(Some).map_err(|_| out_of_range())
        }
        _ => Err(D::Error::custom(format!(
            "invalid type: {number}, expected an integer"
        ))),
    }
}

/// `deserialize_with` of an optional value read from its text (`FromStr`), so a bad one is
/// refused in the parser's words (`unknown platform …`) rather than serde's.
pub fn optional_parsed<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    use serde::de::Error;
    use serde::Deserialize;
    Option::<String>::deserialize(deserializer)?
        .map(|text| text.parse().map_err(D::Error::custom))
        .transpose()
}

/// `Some(None)` for `null`; with `#[serde(default)]`, `None` when absent.
pub fn nullable_integer<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64> + TryFrom<u64>,
{
    optional_integer(deserializer).map(Some)
}

/// `deserialize_with` of a field that takes `null` for its default, as an absent one does.
pub fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de> + Default,
{
    use serde::Deserialize;
    Option::<T>::deserialize(deserializer).map(Option::unwrap_or_default)
}

/// `deserialize_with` of a flag that is on unless it is `false`: absent and `null` are on.
pub fn null_as_true<'de, D>(deserializer: D) -> Result<bool, D::Error>
where
    D: serde::Deserializer<'de>,
{
    use serde::Deserialize;
    Option::<bool>::deserialize(deserializer).map(|flag| flag.unwrap_or(true))
}

pub fn yes() -> bool {
    true
}

fn string_enum(values: impl IntoIterator<Item = &'static str>, nullable: bool) -> Object {
    let schema_type = if nullable {
        SchemaType::from_iter([Type::String, Type::Null])
    } else {
        SchemaType::Type(Type::String)
    };
    let mut values: Vec<Option<&str>> = values.into_iter().map(Some).collect();
    if nullable {
        values.push(None);
    }
    ObjectBuilder::new()
        .schema_type(schema_type)
        .enum_values(Some(values))
        .build()
}

pub fn platform() -> Schema {
    Schema::Object(string_enum(Platform::ALL.map(Platform::as_str), false))
}

pub fn message_status() -> Schema {
    Schema::Object(string_enum(MESSAGE_STATUSES.map(MessageStatus::as_str), false))
}

pub fn decision() -> Schema {
    Schema::Object(string_enum(DECISIONS, false))
}

pub fn part_status() -> Schema {
    Schema::Object(string_enum(PART_STATUSES.map(PartStatus::as_str), false))
}

pub fn optional_platform() -> Schema {
    Schema::Object(string_enum(Platform::ALL.map(Platform::as_str), true))
}

pub fn optional_message_status() -> Schema {
    Schema::Object(string_enum(MESSAGE_STATUSES.map(MessageStatus::as_str), true))
}

pub fn optional_decision() -> Schema {
    Schema::Object(string_enum(DECISIONS, true))
}

pub fn optional_unlinked_policy() -> Schema {
    let all = [UnlinkedPolicy::Deny, UnlinkedPolicy::Allow];
    Schema::Object(string_enum(all.map(UnlinkedPolicy::as_str), true))
}

pub fn optional_telegram_delivery() -> Schema {
    let all = [TelegramDelivery::AtMostOnce, TelegramDelivery::AtLeastOnce];
    Schema::Object(string_enum(all.map(TelegramDelivery::as_str), true))
}

pub fn optional_redispatch_status() -> Schema {
    Schema::Object(string_enum([MessageStatus::DispatchFailed.as_str()], true))
}

pub fn optional_resend_status() -> Schema {
    let statuses = [MessageStatus::DeliveryFailed, MessageStatus::Executed];
    Schema::Object(string_enum(statuses.map(MessageStatus::as_str), true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_lists_are_whole() {
        use MessageStatus::*;
        for status in MESSAGE_STATUSES {
            match status {
                Accepted | Dispatching | Executed | DeliveryFailed | DispatchFailed | DeniedUnlinked
                | Ignored => {}
            }
        }
        let listed: std::collections::HashSet<_> = MESSAGE_STATUSES.into_iter().collect();
        assert_eq!(listed.len(), 7, "each of the 7 statuses once");
        for part in PART_STATUSES {
            match part {
                PartStatus::Pending
                | PartStatus::Sending
                | PartStatus::Sent
                | PartStatus::Failed
                | PartStatus::Unknown => {}
            }
        }
    }

    #[test]
    fn every_listed_status_and_platform_parses_back() {
        for status in MESSAGE_STATUSES {
            assert_eq!(status.as_str().parse::<MessageStatus>().ok(), Some(status));
        }
        for platform in Platform::ALL {
            assert_eq!(platform.as_str().parse::<Platform>().ok(), Some(platform));
        }
    }

    #[test]
    fn an_integral_number_is_an_integer_and_a_fraction_is_not() {
        #[derive(serde::Deserialize)]
        struct Limit {
            #[serde(default, deserialize_with = "optional_integer")]
            limit: Option<i32>,
        }
        let parse = |body: &str| serde_json::from_str::<Limit>(body).map(|l| l.limit);
        assert_eq!(parse(r#"{"limit": 7}"#).ok(), Some(Some(7)));
        assert_eq!(parse(r#"{"limit": 66423.0}"#).ok(), Some(Some(66423)));
        assert_eq!(parse(r#"{"limit": null}"#).ok(), Some(None));
        assert_eq!(parse("{}").ok(), Some(None));
        assert!(parse(r#"{"limit": 1.5}"#).is_err());
        assert!(parse(r#"{"limit": 3e9}"#).is_err(), "past i32");
        assert!(parse(r#"{"limit": "7"}"#).is_err());
    }
}
