//! One module per `pitcrew` subcommand.

pub mod classify;
pub mod discover;
pub mod validate;
