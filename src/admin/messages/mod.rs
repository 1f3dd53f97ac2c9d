//! Message history for tenant admins: the listing, one message with its reply parts, a
//! user's history as the agent would get it next, the console's conversation pages, and
//! the recovery actions. The functions take a pool and a tenant, so the CLI and the console
//! call the same code as the API.

mod conversation;
mod history;
mod list;
mod message;
mod recover;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::http::state::AppState;

pub use conversation::{conversation, ConversationPage, ConversationTurn, Who};
pub use history::user_history;
pub use list::{list_messages, MessagePage, MessagesQuery};
pub use message::{get_message, MessageDetailOut, MessageOut, ReplyPartOut};
pub use recover::{recover_many, recover_one, ActionFilterIn, Recovery};

/// The message routes.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list::list))
        .routes(routes!(message::get))
        .routes(routes!(recover::post_redispatch))
        .routes(routes!(recover::post_resend))
        .routes(routes!(recover::post_redispatch_many))
        .routes(routes!(recover::post_resend_many))
        .routes(routes!(history::history))
}
