//! The listings' page cursor, `<time in µs>_<id>`: plain, so the document's `pattern` admits
//! only decodable ones.

use std::fmt::Display;
use std::str::FromStr;

use chrono::{DateTime, Utc};

use crate::error::AppError;

pub fn encode(at: DateTime<Utc>, id: impl Display) -> String {
    format!("{}_{}", at.timestamp_micros(), id)
}

pub fn decode<Id: FromStr>(cursor: &str) -> Result<(DateTime<Utc>, Id), AppError> {
    let invalid = || AppError::Unprocessable("invalid cursor".into());
    let (micros, id) = cursor.split_once('_').ok_or_else(invalid)?;
    let micros: i64 = micros.parse().map_err(|_| invalid())?;
    let at = DateTime::from_timestamp_micros(micros).ok_or_else(invalid)?;
    Ok((at, id.parse().map_err(|_| invalid())?))
}
