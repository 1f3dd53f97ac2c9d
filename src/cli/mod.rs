//! The command line: one binary, one subcommand per role or admin task.

pub mod args;
mod run;

pub use args::{Cli, Command};
pub use run::run;
