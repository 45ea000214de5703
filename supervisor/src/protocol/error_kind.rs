//! The `kind` of an `error` response: what the supervisor sends and what the host matches on.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// The machine-readable kind of an `error` response. A kind this build does not know (from a
/// newer supervisor) parses as [`ErrorKind::Other`], so the reply still reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// `malformed`: the control payload or the frame stream is not valid, or a manifest fails
    /// validation.
    Malformed,
    /// `version`: `hello` shares no protocol version with the supervisor.
    Version,
    /// `order`: the request or frame is out of order (no `hello` yet, no manifest, no upload).
    Order,
    /// `busy`: an iteration is running, another run holds the sandbox, or the supervisor is
    /// shutting down.
    Busy,
    /// `refused`: the peer, an upload destination or an upload entry breaks a rule.
    Refused,
    /// `not-found`: `collect` of an iteration without a record.
    NotFound,
    /// `internal`: a file system error on the supervisor's side.
    Internal,
    /// `stopped`: the run was ended by the host (`cancel` with `run`); its next `run` is refused.
    Stopped,
    /// A kind this build does not know, as it came.
    Other(String),
}

impl ErrorKind {
    /// Every kind this build sends, for tests and docs.
    pub const KNOWN: [ErrorKind; 8] = [
        ErrorKind::Malformed,
        ErrorKind::Version,
        ErrorKind::Order,
        ErrorKind::Busy,
        ErrorKind::Refused,
        ErrorKind::NotFound,
        ErrorKind::Internal,
        ErrorKind::Stopped,
    ];

    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            ErrorKind::Malformed => "malformed",
            ErrorKind::Version => "version",
            ErrorKind::Order => "order",
            ErrorKind::Busy => "busy",
            ErrorKind::Refused => "refused",
            ErrorKind::NotFound => "not-found",
            ErrorKind::Internal => "internal",
            ErrorKind::Stopped => "stopped",
            ErrorKind::Other(other) => other,
        }
    }

    /// The kind a wire name spells ([`ErrorKind::Other`] when this build does not know it).
    pub fn from_wire(name: &str) -> ErrorKind {
        ErrorKind::KNOWN
            .into_iter()
            .find(|k| k.as_str() == name)
            .unwrap_or_else(|| ErrorKind::Other(name.to_string()))
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorKind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Ok(ErrorKind::from_wire(&name))
    }
}
