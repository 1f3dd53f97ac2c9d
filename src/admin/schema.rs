//! The checks that hold the handlers to the OpenAPI document (`crate::api_schema`): a value
//! it refuses answers 4xx, never 500. Text is bounded and holds no NUL because PostgreSQL
//! `text` cannot store one and an indexed id must fit a B-tree entry.

pub use crate::api_schema::*;

use crate::error::AppError;
use crate::http::state::AppState;

/// JSON Schema's `maxLength` counts code points, as `chars` does.
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

pub fn check_optional_text(field: &str, value: Option<&str>, max: usize) -> Result<(), AppError> {
    value.map_or(Ok(()), |value| check_text(field, value, max))
}

/// A segment the document's pattern refuses names no resource (404, as an unparsable id).
pub fn names_something(segment: &str, max: usize) -> bool {
    !segment.contains('\0') && segment.chars().count() <= max
}

/// 422 naming the rule, never the resolved addresses. An empty string clears the field.
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
