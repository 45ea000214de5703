//! Why the server refuses a request: one variant per `error` kind of the control protocol, each
//! carrying the message sent with it.

use crate::protocol::{ErrorKind, FrameError, Response};
use crate::unpack::UnpackError;

/// A request the server answers with an `error` response. The variant is the wire `kind`
/// ([`RequestError::code`]); the payload is the `message`, naming the field, entry or path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// `malformed`: the control payload or the frame stream is not valid, or a manifest fails
    /// validation.
    #[error("{0}")]
    Malformed(String),
    /// `version`: `hello` shares no protocol version with the supervisor.
    #[error("{0}")]
    Version(String),
    /// `order`: the request or frame is out of order (no `hello` yet, no manifest, no upload).
    #[error("{0}")]
    Order(String),
    /// `busy`: an iteration is running (or the supervisor is shutting down).
    #[error("{0}")]
    Busy(String),
    /// `refused`: the peer, an upload destination or an upload entry breaks a rule.
    #[error("{0}")]
    Refused(String),
    /// `not-found`: `collect` of an iteration without a record.
    #[error("{0}")]
    NotFound(String),
    /// `internal`: a file system error on the supervisor's side.
    #[error("{0}")]
    Internal(String),
    /// `stopped`: the run was ended by the host (`cancel` with `run`); its next `run` is refused.
    #[error("{0}")]
    Stopped(String),
}

impl RequestError {
    /// The machine-readable `kind` sent on the wire.
    pub fn code(&self) -> ErrorKind {
        match self {
            RequestError::Malformed(_) => ErrorKind::Malformed,
            RequestError::Version(_) => ErrorKind::Version,
            RequestError::Order(_) => ErrorKind::Order,
            RequestError::Busy(_) => ErrorKind::Busy,
            RequestError::Refused(_) => ErrorKind::Refused,
            RequestError::NotFound(_) => ErrorKind::NotFound,
            RequestError::Internal(_) => ErrorKind::Internal,
            RequestError::Stopped(_) => ErrorKind::Stopped,
        }
    }

    /// The human-readable `message` sent on the wire.
    pub fn message(&self) -> &str {
        match self {
            RequestError::Malformed(m)
            | RequestError::Version(m)
            | RequestError::Order(m)
            | RequestError::Busy(m)
            | RequestError::Refused(m)
            | RequestError::NotFound(m)
            | RequestError::Internal(m)
            | RequestError::Stopped(m) => m,
        }
    }

    /// The `error` response answering request `id` (0 when the request could not be parsed).
    pub fn to_response(&self, id: u64) -> Response {
        Response::Error {
            id,
            kind: self.code(),
            message: self.message().to_string(),
        }
    }
}

impl From<FrameError> for RequestError {
    /// Every framing or payload error is `malformed`.
    fn from(err: FrameError) -> Self {
        RequestError::Malformed(err.to_string())
    }
}

impl From<UnpackError> for RequestError {
    /// An I/O error while unpacking is the supervisor's (`internal`); anything else is an
    /// entry of the upload breaking a rule (`refused`).
    fn from(err: UnpackError) -> Self {
        match err {
            err @ UnpackError::Io(..) => RequestError::Internal(err.to_string()),
            err => RequestError::Refused(err.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Frame;

    #[test]
    fn every_kind_has_a_variant() {
        let all = [
            RequestError::Malformed("m".into()),
            RequestError::Version("m".into()),
            RequestError::Order("m".into()),
            RequestError::Busy("m".into()),
            RequestError::Refused("m".into()),
            RequestError::NotFound("m".into()),
            RequestError::Internal("m".into()),
            RequestError::Stopped("m".into()),
        ];
        let codes: Vec<ErrorKind> = all.iter().map(RequestError::code).collect();
        assert_eq!(codes, ErrorKind::KNOWN);
        for err in all {
            assert_eq!(err.message(), "m");
            assert_eq!(err.to_string(), "m");
        }
    }

    #[test]
    fn the_wire_form_is_unchanged() {
        let err = RequestError::Order("run needs a manifest: send set_manifest first".into());
        let frame = Frame::control(&err.to_response(3));
        assert_eq!(
            String::from_utf8(frame.payload).unwrap(),
            r#"{"type":"error","id":3,"kind":"order","message":"run needs a manifest: send set_manifest first"}"#
        );
    }
}
