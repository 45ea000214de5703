//! Egress: what pitcrew reads of the connections it carries out of the sandbox.
//!
//! - [`address`]: the addresses an allowed name may be dialled at, and the dial itself (the
//!   host's, or the supervisor's under `from: sandbox`);
//! - [`sni`]: the server name a TLS ClientHello asks for, read from a connection's first bytes
//!   so that a tunnel to an allowed name cannot carry TLS to another one.

pub mod address;
pub mod sni;
