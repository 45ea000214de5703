//! `pitcrew`: the host CLI.

fn main() {}
