//! One module per `pitcrew` subcommand.

pub mod batch;
pub mod cancel;
pub mod classify;
pub mod collect;
pub mod discover;
pub mod docs;
pub mod down;
pub mod html_report;
pub mod inspect;
pub mod lock;
pub mod logs;
pub mod prune;
pub mod ps;
pub mod run;
pub mod validate;
