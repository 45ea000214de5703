//! One module per `pitcrew` subcommand.

pub mod classify;
