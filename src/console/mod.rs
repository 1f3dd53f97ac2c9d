//! The tenant admins' web console at `/console` (docs/console.md): server-rendered HTML from
//! askama templates (`templates/console/`), which escape every value unless a template says
//! `|safe` (markup this code built); one small script file (`script.rs`) that no page needs. Every page reads and writes through the admin API's own functions, in the
//! session's tenant transaction, with the API's checks and audit records.

mod choices;
mod connectors;
mod conversation;
mod error;
mod handoff;
mod html;
mod links;
mod markdown;
mod overview;
mod pages;
mod parts;
mod reactions;
mod script;
pub mod session;
mod sign_in;
mod turns;
mod users;

use axum::routing::{get, post};
use axum::Router;

use crate::http::state::AppState;

pub use error::deadline_passed;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console", get(sign_in::home))
        .route(
            "/console/sign-in",
            get(sign_in::sign_in_page).post(sign_in::sign_in),
        )
        .route("/console/sign-out", post(sign_in::sign_out))
        .route("/console/overview", get(overview::overview))
        .route(script::PATH, get(script::serve))
        .route("/console/turns", get(turns::turns))
        .route("/console/turns/{id}", get(turns::turn))
        .route("/console/turns/{id}/redispatch", post(turns::redispatch))
        .route("/console/turns/{id}/resend", post(turns::resend))
        .route("/console/failed", get(turns::failed))
        .route("/console/users", get(users::list))
        .route("/console/conversation", get(users::conversation))
        .route("/console/conversation/take-over", post(handoff::take_over))
        .route("/console/conversation/hand-back", post(handoff::hand_back))
        .route("/console/conversation/messages", post(handoff::answer))
        .route("/console/held", get(handoff::held))
        .route(
            "/console/connectors",
            get(connectors::list).post(connectors::create),
        )
        .route("/console/connectors/{id}/rotate", post(connectors::rotate))
        .route("/console/connectors/{id}/disable", post(connectors::disable))
        .route("/console/connectors/{id}/enable", post(connectors::enable))
        .route("/console/links", get(links::list).post(links::add))
        .route("/console/links/remove", post(links::remove))
}
