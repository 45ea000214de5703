//! Egress: what pitcrew reads of the connections it carries out of the sandbox.
//!
//! - [`sni`]: the server name a TLS ClientHello asks for, read from a connection's first bytes
//!   so that a tunnel to an allowed name cannot carry TLS to another one.

pub mod sni;
