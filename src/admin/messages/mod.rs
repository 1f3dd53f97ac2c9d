//! Recorded turns for tenant admins: listing, one message, a user's next history, the
//! console's conversations, recovery. The CLI and the console call these same functions.

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
pub use message::{get_message, MessageDetailOut, MessageOut, ReactionOut, ReplyPartOut};
pub use recover::{recover_many, recover_one, ActionFilterIn, Recovery};

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
