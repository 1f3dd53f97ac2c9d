//! The checks that hold the admin handlers to the OpenAPI document: `crate::api_schema`'s
//! (text bounded, without NUL: a value it refuses answers 4xx, never 500), and the egress
//! rules for a URL a tenant sets.

pub use crate::api_schema::*;

use crate::error::AppError;
use crate::http::state::AppState;

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
