//! The tenant admin API (`/v1/admin/…`, every call inside the key's tenant transaction) and
//! the operator API (`/v1/operator/…`); docs/admin.md. Handlers are thin: the functions they
//! call take a pool and a tenant, so the CLI and the console run the same code.

pub mod audit;
pub mod auth;
pub mod connectors;
pub mod conversations;
pub mod cursor;
pub mod lifecycle;
pub mod links;
pub mod messages;
pub mod operator;
pub mod schema;
pub mod tenant;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::http::state::AppState;

/// Each route is documented by the same `routes!` call that serves it.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(messages::router())
        .routes(routes!(connectors::list, connectors::create))
        .routes(routes!(connectors::get, connectors::update, connectors::delete))
        .routes(routes!(connectors::disable))
        .routes(routes!(links::list, links::create))
        .routes(routes!(links::delete))
        .routes(routes!(tenant::get, tenant::update))
        .routes(routes!(tenant::rotate_dispatch_secret))
        .routes(routes!(lifecycle::erase_user))
        .routes(routes!(lifecycle::erase_sender))
        .routes(routes!(lifecycle::export))
        .routes(routes!(audit::list))
        .routes(routes!(conversations::get_held))
        .routes(routes!(conversations::post_take_over))
        .routes(routes!(conversations::post_hand_back))
        .routes(routes!(conversations::post_message))
        .routes(routes!(operator::list_tenants, operator::create_tenant))
        .routes(routes!(operator::get_tenant, operator::update_tenant))
        .routes(routes!(operator::list_keys, operator::issue_key_route))
        .routes(routes!(operator::revoke_key))
}
