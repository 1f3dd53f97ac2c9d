//! What requests and command lines give, read from a body, a query string or flags, their
//! strings parsed into domain types where they come in. Above `db`, whose queries take plain
//! filters and inputs made from these shapes.

mod connectors;
mod selection;

pub use connectors::{
    ConnectorPatch, ConnectorSettings, NewConnector, SecretsIn, DEFAULT_GRACE_SECS, MAX_GRACE_SECS,
};
pub use selection::MessageSelection;
