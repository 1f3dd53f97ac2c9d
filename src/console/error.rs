//! The console's error page: what a console request that went wrong answers.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::html::{self, RenderPage};
use crate::error::AppError;

/// Client errors say what was wrong; anything else is logged by `AppError` and shown as an
/// opaque failure.
pub enum ConsoleError {
    App(AppError),
    Csrf,
}

impl From<AppError> for ConsoleError {
    fn from(err: AppError) -> Self {
        Self::App(err)
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            ConsoleError::Csrf => (
                StatusCode::FORBIDDEN,
                "This form has expired or did not come from the console. Go back, reload and try again."
                    .to_owned(),
            ),
            ConsoleError::App(err) => {
                let message = err.to_string();
                // `AppError`'s own answer logs server errors with their cause.
                let status = err.into_response().status();
                let shown = if status.is_server_error() {
                    "Something went wrong on our side; try again in a moment.".to_owned()
                } else {
                    message
                };
                (status, shown)
            }
        };
        let body = html::Alert {
            text: &message,
            back: "/console/turns",
            back_label: "Back to conversations",
        }
        .render_page();
        html::respond(
            status,
            html::page(status.canonical_reason().unwrap_or("Error"), None, &body),
        )
    }
}

pub type PageResult = Result<Response, ConsoleError>;

/// Past `CB_ADMIN_DEADLINE_MS`: 503 with `Retry-After`, as the API's JSON answer has.
pub fn deadline_passed(limit_ms: u64) -> Response {
    let mut response = ConsoleError::App(AppError::DeadlinePassed(limit_ms)).into_response();
    response.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("1"),
    );
    response
}
