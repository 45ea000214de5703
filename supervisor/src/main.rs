//! `pitcrew-init`: the sandbox supervisor (PID 1 of the sandbox container).

fn main() {}
