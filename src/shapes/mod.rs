//! What requests and command lines give, read from a body, a query string or flags, their
//! strings parsed into domain types where they come in. Above `db`, whose queries take plain
//! filters made from these shapes.

mod selection;

pub use selection::MessageSelection;
