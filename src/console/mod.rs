//! The tenant admin web console at `/console`: sign in with a tenant admin key, look at
//! conversations, a turn as the agent saw it with its reply parts, the failed turns, and
//! redispatch or resend them.
//!
//! Server-rendered HTML built with plain Rust strings (`html`), no script at all, one
//! embedded stylesheet: nothing to build, bundle or serve apart, no template crate to keep
//! up to date, and every page works in any browser. The cost is that escaping is by hand:
//! every value from data goes through `html::esc`, and the test of a `<script>` message
//! keeps that honest. The pages are not part of the OpenAPI document (they are not API).
//!
//! Every page reads and writes through the same functions as the admin API
//! (`admin::messages`, `admin::connectors`, `admin::links`, `db::…`), so through the
//! session's tenant transaction and its RLS policies, with the API's checks and audit
//! records (the actor is the signed-in key). Pages: `turns` (conversations, one turn,
//! failed; their bodies in `pages`), `connectors`, `links`, `users` (conversations by
//! user). Signing in: `sign_in`; sessions and CSRF: `session`.

mod connectors;
mod error;
mod html;
mod links;
mod pages;
pub mod session;
mod sign_in;
mod turns;
mod users;

use axum::routing::{get, post};
use axum::Router;

use crate::http::state::AppState;

pub use error::deadline_passed;

/// The console's routes, with this instance's session store.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/console", get(sign_in::home))
        .route(
            "/console/sign-in",
            get(sign_in::sign_in_page).post(sign_in::sign_in),
        )
        .route("/console/sign-out", post(sign_in::sign_out))
        .route("/console/turns", get(turns::turns))
        .route("/console/turns/{id}", get(turns::turn))
        .route("/console/turns/{id}/redispatch", post(turns::redispatch))
        .route("/console/turns/{id}/resend", post(turns::resend))
        .route("/console/failed", get(turns::failed))
        .route("/console/users", get(users::list))
        .route("/console/conversation", get(users::conversation))
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
