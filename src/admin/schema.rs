//! The checks that hold the admin and operator handlers to what the OpenAPI document says
//! (`crate::api_schema`, re-exported here): a value the document allows is taken (or names
//! no resource: 404), and one it refuses is answered 4xx, never 500. Text is bounded and
//! holds no NUL (PostgreSQL `text` cannot store one, and ids are indexed: a B-tree entry
//! must stay under about 2.7 kB); past them the answer is 400, as for any value the
//! database cannot store.

pub use crate::api_schema::*;

use crate::error::AppError;
use crate::http::state::AppState;

/// 400, as for any value the database cannot store, unless `value` fits `max` characters
/// (JSON Schema's `maxLength` counts code points, as `chars` does) and holds no NUL.
pub fn check_text(field: &str, value: &str, max: usize) -> Result<(), AppError> {
    if value.contains('\0') {
        return Err(AppError::BadRequest(format!("{field} must not contain NUL")));
    }
    if value.chars().count() > max {
        return Err(AppError::BadRequest(format!(
            "{field} must be at most {max} characters"
        )));
    }
    Ok(())
}

/// `check_text` of an optional field.
pub fn check_optional_text(field: &str, value: Option<&str>, max: usize) -> Result<(), AppError> {
    value.map_or(Ok(()), |value| check_text(field, value, max))
}

/// Whether a path segment can name anything: a segment the document's pattern and
/// `maxLength` refuse names no resource (404, as an unparsable id does).
pub fn names_something(segment: &str, max: usize) -> bool {
    !segment.contains('\0') && segment.chars().count() <= max
}

/// The save-time egress check of a URL the caller sets (`field` names it in the answer):
/// 422 naming the rule, never the addresses its host resolved to. An empty string (which
/// clears the field) is not checked.
pub async fn check_egress(state: &AppState, field: &str, url: Option<&str>) -> Result<(), AppError> {
    let Some(url) = url.filter(|u| !u.is_empty()) else {
        return Ok(());
    };
    state
        .settings
        .egress
        .allow
        .check_url(url)
        .await
        .map_err(|refusal| AppError::Unprocessable(format!("{field} {refusal}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_over_its_limit_or_with_a_nul_is_refused_and_the_limit_counts_characters() {
        assert!(check_text("name", &"é".repeat(NAME_MAX), NAME_MAX).is_ok());
        assert!(check_text("name", &"é".repeat(NAME_MAX + 1), NAME_MAX).is_err());
        assert!(check_text("name", "a\0b", NAME_MAX).is_err());
        assert!(names_something("U123", ID_MAX));
        assert!(!names_something("U\0", ID_MAX));
    }
}
