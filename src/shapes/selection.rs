//! The one message selection (user, platform, connector, status, received since and until)
//! of the listing's query, the bulk resend and redispatch bodies, the console's form and both
//! command lines.

use serde::Deserialize;
use serde_json::Value;

use crate::api_schema;
use crate::db::messages::Matching;
use crate::domain::{ConnectorId, MessageStatus, Platform};

/// Which messages: each field set narrows the choice. The one selection of the listing, the
/// recovery actions and both command lines (each describes `--status` in its own words), made
/// into the database's `Matching`. The API reads it flattened (`MessageSelection::flattened`) and documents
/// it as query parameters (`IntoParams`) and as body fields (`ToSchema`; each recovery action
/// narrows `status` to the statuses it applies to).
#[derive(Debug, Clone, Default, clap::Args, Deserialize, utoipa::IntoParams, utoipa::ToSchema)]
#[into_params(parameter_in = Query)]
pub struct MessageSelection {
    /// Linked user id.
    #[arg(long = "user", value_name = "USER")]
    #[param(max_length = 256, pattern = r"^[^\u0000]*$")]
    #[schema(max_length = 256, pattern = r"^[^\u0000]*$")]
    pub user_id: Option<String>,
    #[arg(long, value_enum)]
    #[serde(default, deserialize_with = "api_schema::optional_parsed")]
    #[param(schema_with = api_schema::platform)]
    #[schema(schema_with = api_schema::optional_platform)]
    pub platform: Option<Platform>,
    #[arg(long = "connector", value_name = "CONNECTOR")]
    #[param(value_type = Option<uuid::Uuid>)]
    #[schema(value_type = Option<uuid::Uuid>)]
    pub connector_id: Option<ConnectorId>,
    #[arg(long)]
    #[serde(default, deserialize_with = "api_schema::optional_parsed")]
    #[param(schema_with = api_schema::message_status)]
    #[schema(schema_with = api_schema::optional_message_status)]
    pub status: Option<MessageStatus>,
    /// Received at or after (RFC 3339).
    #[arg(long)]
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Received before (RFC 3339).
    #[arg(long)]
    pub until: Option<chrono::DateTime<chrono::Utc>>,
}

impl MessageSelection {
    /// Its fields, as the API names them (serde's own list).
    pub fn fields() -> &'static [&'static str] {
        api_schema::field_names::<Self>()
    }

    /// From an object of its fields (values as JSON or as query-string text); an error names
    /// its field.
    pub fn from_object(fields: serde_json::Map<String, Value>) -> Result<Self, String> {
        serde_path_to_error::deserialize(Value::Object(fields)).map_err(|err| err.to_string())
    }

    /// `deserialize_with` of a `#[serde(flatten)]` selection: takes its own fields, and keeps
    /// in an error the field it is in, which serde's buffering of flattened fields loses.
    pub fn flattened<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = serde_json::Map<String, Value>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a message selection")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut fields = serde_json::Map::new();
                while let Some((name, value)) = map.next_entry::<String, Value>()? {
                    if fields.contains_key(&name) {
                        let field = MessageSelection::fields().iter().find(|field| **field == name);
                        return Err(serde::de::Error::duplicate_field(
                            field.copied().unwrap_or("field"),
                        ));
                    }
                    fields.insert(name, value);
                }
                Ok(fields)
            }
        }
        let fields = deserializer.deserialize_struct("MessageSelection", Self::fields(), Fields)?;
        Self::from_object(fields).map_err(serde::de::Error::custom)
    }
}

impl From<MessageSelection> for Matching {
    fn from(selection: MessageSelection) -> Self {
        let MessageSelection {
            user_id,
            platform,
            connector_id,
            status,
            since,
            until,
        } = selection;
        Self {
            user_id,
            platform,
            connector_id,
            status,
            since,
            until,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_field_list_is_what_the_derives_name() {
        use utoipa::openapi::{RefOr, Schema};
        use utoipa::{IntoParams, PartialSchema};
        let params: Vec<String> = MessageSelection::into_params(|| None)
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(params, MessageSelection::fields());
        let RefOr::T(Schema::Object(body)) = MessageSelection::schema() else {
            panic!("an object");
        };
        let mut fields = MessageSelection::fields().to_vec();
        fields.sort_unstable();
        assert!(body.properties.keys().eq(fields.iter().copied()));
    }

    /// As a query string's flattened part: typed, each error naming its field.
    #[derive(Debug, Deserialize)]
    struct Flat {
        #[serde(flatten, deserialize_with = "MessageSelection::flattened")]
        matching: MessageSelection,
        limit: Option<i64>,
    }

    fn flat(query: &str) -> Result<Flat, String> {
        let uri: axum::http::Uri = format!("/?{query}").parse().map_err(|e| format!("{e}"))?;
        axum::extract::Query::<Flat>::try_from_uri(&uri)
            .map(|q| q.0)
            .map_err(|e| e.body_text())
    }

    #[test]
    fn a_flattened_selection_reads_typed_values_and_names_the_field_of_an_error() {
        let read = flat(
            "platform=telegram&status=delivery_failed&user_id=&limit=7&other=x\
             &connector_id=0192f0c4-7a6e-7b3a-9c1d-2e4f5a6b7c8d&since=2026-11-22T00:00:00Z",
        )
        .expect("a good query");
        assert_eq!(read.matching.platform, Some(Platform::Telegram));
        assert_eq!(read.matching.status, Some(MessageStatus::DeliveryFailed));
        assert_eq!(
            read.matching.user_id.as_deref(),
            Some(""),
            "only the console drops empties"
        );
        assert!(read.matching.connector_id.is_some() && read.matching.since.is_some());
        assert_eq!(read.limit, Some(7));
        assert!(flat("").is_ok_and(|read| read.matching.status.is_none()));

        for (query, says) in [
            ("platform=irc", "platform: unknown platform `irc`"),
            ("status=", "status: unknown message status ``"),
            ("since=yesterday", "since: "),
            ("connector_id=x", "connector_id: "),
            ("status=executed&status=ignored", "duplicate field `status`"),
            ("limit=many", "limit: "),
        ] {
            let refused = flat(query).expect_err(query);
            assert!(refused.contains(says), "{query}: {refused}");
        }
    }
}
