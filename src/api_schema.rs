//! What the OpenAPI document says of the values the API takes: text limits, enums built from
//! the domain types (so it cannot list a value the parser refuses), JSON Schema's integers,
//! and bodies made of parts (`FromBody`). `#[schema(max_length)]` takes literals only, so the
//! contract test tries each limit.

use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::Value;
use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, SchemaType, Type};
use utoipa::openapi::{Object, RefOr, Schema};

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

/// A text the document refuses (400): what is wrong with which field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TextRefused(pub String);

/// Bounded and without NUL: PostgreSQL `text` cannot store one, and an indexed id must fit
/// a B-tree entry. JSON Schema's `maxLength` counts code points, as `chars` does.
pub fn check_text(field: &str, value: &str, max: usize) -> Result<(), TextRefused> {
    if value.contains('\0') {
        return Err(TextRefused(format!("{field} must not contain NUL")));
    }
    if value.chars().count() > max {
        return Err(TextRefused(format!("{field} must be at most {max} characters")));
    }
    Ok(())
}

pub fn check_optional_text(field: &str, value: Option<&str>, max: usize) -> Result<(), TextRefused> {
    value.map_or(Ok(()), |value| check_text(field, value, max))
}

/// A segment the document's pattern refuses names no resource (404, as an unparsable id).
pub fn names_something(segment: &str, max: usize) -> bool {
    !segment.contains('\0') && segment.chars().count() <= max
}

/// `the_status_lists_are_whole` stops compiling when a domain status is missing here.
pub const MESSAGE_STATUSES: [MessageStatus; 9] = [
    MessageStatus::Accepted,
    MessageStatus::Dispatching,
    MessageStatus::Executed,
    MessageStatus::DeliveryFailed,
    MessageStatus::DispatchFailed,
    MessageStatus::DeniedUnlinked,
    MessageStatus::Ignored,
    MessageStatus::Held,
    MessageStatus::AwaitingAgent,
];

pub const PART_STATUSES: [PartStatus; 5] = [
    PartStatus::Pending,
    PartStatus::Sending,
    PartStatus::Sent,
    PartStatus::Failed,
    PartStatus::Unknown,
];

/// Set by ingress (`ignore_non_text`, `deny_unlinked`), by the worker (`respond`,
/// `no_reply`, `dispatch_failed`, `held`: a person holds the conversation, `async`: the agent
/// answers later), on a person's own turn (`person`) and on the agent's (`proactive`).
pub const DECISIONS: [&str; 9] = [
    "respond",
    "no_reply",
    "dispatch_failed",
    "deny_unlinked",
    "ignore_non_text",
    "held",
    "person",
    "async",
    "proactive",
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

/// A request body made of parts, the structs it flattens, read as strictly as
/// `deny_unknown_fields` reads one struct (serde does not combine the two): a key no part
/// reads is refused where it stands with serde's `unknown field` error, and an error inside
/// a part names its field, as axum's extractor names it for a plain struct.
pub trait FromBody: Sized {
    /// Every field the body takes: its own and its parts' (`field_names`).
    fn fields() -> &'static [&'static str];

    fn from_body<E: de::Error>(body: &Body) -> Result<Self, E>;
}

/// `Deserialize::deserialize` of a `FromBody` type.
pub fn read_body<'de, T: FromBody, D: Deserializer<'de>>(deserializer: D) -> Result<T, D::Error> {
    deserializer.deserialize_map(BodyVisitor(std::marker::PhantomData))
}

/// The JSON object of a body, every key known.
pub struct Body(Value);

impl Body {
    /// One part, a struct of some of the body's fields.
    pub fn part<T: DeserializeOwned, E: de::Error>(&self) -> Result<T, E> {
        serde_path_to_error::deserialize(&self.0).map_err(E::custom)
    }

    /// One field of the body's own, read by `read` from its value or, absent, from `null`.
    pub fn field<'a, T, E: de::Error>(
        &'a self,
        name: &str,
        read: impl FnOnce(&'a Value) -> Result<T, serde_json::Error>,
    ) -> Result<T, E> {
        read(self.0.get(name).unwrap_or(&Value::Null)).map_err(|e| E::custom(format!("{name}: {e}")))
    }

    /// One field of the body's own that must be there.
    pub fn required<T: DeserializeOwned, E: de::Error>(&self, name: &'static str) -> Result<T, E> {
        match self.0.get(name) {
            Some(value) => T::deserialize(value).map_err(|e| E::custom(format!("{name}: {e}"))),
            None => Err(E::missing_field(name)),
        }
    }
}

struct BodyVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: FromBody> Visitor<'de> for BodyVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let mut fields = serde_json::Map::new();
        while let Some(key) = map.next_key_seed(KnownKey(T::fields()))? {
            let value = map.next_value()?;
            fields.insert(key, value);
        }
        // Read here rather than once the object is read, so that errors say where it ends.
        T::from_body(&Body(Value::Object(fields)))
    }
}

struct KnownKey(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for KnownKey {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        use serde::Deserialize;
        let key = String::deserialize(deserializer)?;
        match self.0.contains(&key.as_str()) {
            true => Ok(key),
            false => Err(de::Error::unknown_field(&key, self.0)),
        }
    }
}

/// The field names serde's derive reads for `T`, a struct without `flatten` (the list it
/// hands `deserialize_struct`), in declaration order; empty for anything else.
pub fn field_names<T: DeserializeOwned>() -> &'static [&'static str] {
    struct Names(Option<&'static [&'static str]>);

    impl<'de> Deserializer<'de> for &mut Names {
        type Error = de::value::Error;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            self.0 = Some(fields);
            Err(de::Error::custom("names only"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
            ignored_any
        }
    }

    let mut names = Names(None);
    // Only the names are wanted: the error that stops the read is expected.
    let _ = T::deserialize(&mut names);
    names.0.unwrap_or_default()
}

/// The schema of a `FromBody` body: one object with every part's properties, refusing any other.
pub fn body_schema(parts: impl IntoIterator<Item = RefOr<Schema>>) -> Object {
    let mut body = ObjectBuilder::new()
        .schema_type(Type::Object)
        .additional_properties(Some(AdditionalProperties::FreeForm(false)))
        .build();
    for part in parts {
        if let RefOr::T(Schema::Object(part)) = part {
            body.properties.extend(part.properties);
            body.required.extend(part.required);
        }
    }
    body
}

/// Makes a property of `body` required and no longer nullable.
pub fn require(body: &mut Object, name: &str) {
    if let Some(RefOr::T(Schema::Object(property))) = body.properties.get_mut(name) {
        if let SchemaType::Array(types) = &property.schema_type {
            let mut types: Vec<Type> = types.iter().filter(|t| **t != Type::Null).cloned().collect();
            property.schema_type = match types.len() {
                1 => SchemaType::Type(types.remove(0)),
                _ => SchemaType::Array(types),
            };
        }
    }
    body.required.push(name.to_owned());
}

/// A nullable boolean.
pub fn optional_bool() -> Schema {
    Schema::Object(
        ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([Type::Boolean, Type::Null]))
            .build(),
    )
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
                | Ignored | Held | AwaitingAgent => {}
            }
        }
        let listed: std::collections::HashSet<_> = MESSAGE_STATUSES.into_iter().collect();
        assert_eq!(listed.len(), 9, "each of the 9 statuses once");
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
