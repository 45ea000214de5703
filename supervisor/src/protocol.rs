//! The host ↔ supervisor control protocol, version 1: framing and messages.
//!
//! One byte stream carries frames. Every frame is a 6-byte header and a payload:
//!
//! ```text
//! kind: u8   1 = control (payload is one JSON message), 2 = data (payload is raw bytes)
//! chan: u8   0 for control frames; for data: 1 agent stdout, 2 agent stderr, 3 tar stream,
//!            4 the listing of an offered upload, 5 a carried connection's bytes ([`tunnel`])
//! len:  u32  big-endian payload length: at most MAX_CONTROL_PAYLOAD (control), MAX_PAYLOAD (data)
//! ```
//!
//! A tar stream (an upload from the host, a collect to the host) is a run of data frames on
//! channel 3 ended by an empty data frame on channel 3. Control messages are [`Request`]s from
//! the host and [`Response`]s from the supervisor; each request carries an `id` that its
//! responses repeat. The first request on a connection must be `hello`. Anything malformed gets
//! an `error` response (and the connection is closed when the stream itself can no longer be
//! trusted: a bad header or an oversized frame). Reference: `docs/protocol.md`.
//!
//! # One type on both sides
//!
//! Every reply is a type of this module, which the supervisor writes and the host reads:
//! [`Response`], the `ok` details of [`detail`] (one per request), the `status` document of
//! [`status`], the event steps, states and details of [`events`], the error kinds of
//! [`ErrorKind`]. A field renamed on one side therefore does not compile on the other. The
//! supervisor answers `cancel` so, and the host reads the answer so:
//!
//! ```
//! use pitcrew_core::protocol::{detail::Cancelled, Response};
//! // The supervisor's side.
//! let sent = Response::ok(6, &Cancelled { cancelled: true, run_stopped: false });
//! // The host's side.
//! let Response::Ok { detail, .. } = sent else { unreachable!() };
//! let read: Cancelled = detail.read().unwrap();
//! assert!(read.cancelled && !read.run_stopped);
//! ```
//!
//! Had the field been renamed (here `was_cancelled`), the host's read would not compile (each
//! `compile_fail` example is the passing one above with a name changed, so the name is what
//! fails):
//!
//! ```compile_fail
//! use pitcrew_core::protocol::{detail::Cancelled, OkDetail};
//! fn host_reads(detail: &OkDetail) -> bool {
//!     let read: Cancelled = detail.read().unwrap();
//!     read.was_cancelled
//! }
//! ```
//!
//! nor would a supervisor that writes the old name:
//!
//! ```compile_fail
//! use pitcrew_core::protocol::{detail::Cancelled, Response};
//! let sent = Response::ok(6, &Cancelled { was_cancelled: true, run_stopped: false });
//! ```
//!
//! The same holds for the `status` document the host reads (`pitcrew inspect`, `ps`, `run
//! --resume`):
//!
//! ```compile_fail
//! use pitcrew_core::protocol::StatusDoc;
//! fn host_reads(status: &StatusDoc) -> bool {
//!     status.manifest_is_loaded
//! }
//! ```

use crate::manifest::Manifest;
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

pub mod detail;
mod error_kind;
pub mod events;
pub mod status;
pub mod tunnel;

pub use detail::{OkDetail, OkReply};
pub use error_kind::ErrorKind;
pub use events::{EventDetail, Step, StepDetail, StepState};
pub use status::{ClaimPlan, StatusDoc};

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u32 = 1;
/// The most bytes of `feedback` a `run` request may carry (an argv element may hold 128 KiB).
pub const MAX_FEEDBACK: usize = 64 * 1024;

/// Cuts `text` to at most `room` bytes by dropping its start (at a character boundary);
/// returns how many bytes went.
pub fn keep_end(text: &mut String, room: usize) -> usize {
    if text.len() <= room {
        return 0;
    }
    let mut start = text.len() - room;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text.drain(..start);
    start
}
/// Largest payload of a data frame (1 MiB): larger frames are refused, never buffered.
/// Senders split byte streams into frames of at most this size.
pub const MAX_PAYLOAD: usize = 1 << 20;
/// Largest payload of a control frame (32 MiB): one JSON message, which for `set_manifest`
/// carries every tree's per-file listing (about 160 bytes a file: 200,000 files fit). Only root
/// can connect, and a larger frame is refused before it is buffered.
pub const MAX_CONTROL_PAYLOAD: usize = 32 << 20;

/// The payload limit for frames of `kind`.
pub fn max_payload(kind: FrameKind) -> usize {
    match kind {
        FrameKind::Control => MAX_CONTROL_PAYLOAD,
        FrameKind::Data => MAX_PAYLOAD,
    }
}
/// Size of a frame header.
pub const HEADER_LEN: usize = 6;

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FrameKind {
    /// One JSON control message.
    Control,
    /// Raw bytes on a [`Channel`].
    Data,
}

/// Which byte stream a data frame belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Channel {
    /// Control frames.
    Control,
    /// The agent's stdout.
    Stdout,
    /// The agent's stderr.
    Stderr,
    /// A tar stream (upload or collect), ended by an empty frame.
    Tar,
    /// The listing an offered upload starts with (`upload` with `offer`), ended by an empty
    /// frame.
    Listing,
    /// The bytes of a connection the host carries for the agent (feature `network`): each
    /// payload starts with the 4-byte big-endian connection id ([`tunnel`]).
    Tunnel,
}

impl Channel {
    fn to_byte(self) -> u8 {
        match self {
            Channel::Control => 0,
            Channel::Stdout => 1,
            Channel::Stderr => 2,
            Channel::Tar => 3,
            Channel::Listing => 4,
            Channel::Tunnel => 5,
        }
    }

    fn from_byte(b: u8) -> Option<Channel> {
        Some(match b {
            0 => Channel::Control,
            1 => Channel::Stdout,
            2 => Channel::Stderr,
            3 => Channel::Tar,
            4 => Channel::Listing,
            5 => Channel::Tunnel,
            _ => return None,
        })
    }
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Control or data.
    pub kind: FrameKind,
    /// The channel (always [`Channel::Control`] for control frames).
    pub channel: Channel,
    /// The payload.
    pub payload: Vec<u8>,
}

impl Frame {
    /// A control frame carrying `message` as JSON.
    pub fn control<T: Serialize>(message: &T) -> Frame {
        Frame {
            kind: FrameKind::Control,
            channel: Channel::Control,
            // Serializing the protocol's own plain enums cannot fail.
            payload: serde_json::to_vec(message).unwrap_or_default(),
        }
    }

    /// A data frame.
    pub fn data(channel: Channel, payload: Vec<u8>) -> Frame {
        Frame {
            kind: FrameKind::Data,
            channel,
            payload,
        }
    }

    /// The encoded frame: header and payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.payload.len());
        out.push(match self.kind {
            FrameKind::Control => 1,
            FrameKind::Data => 2,
        });
        out.push(self.channel.to_byte());
        let len = u32::try_from(self.payload.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&self.payload);
        out
    }

    /// Decodes a control frame's JSON payload.
    pub fn json<T: for<'de> Deserialize<'de>>(&self) -> Result<T, FrameError> {
        if self.kind != FrameKind::Control {
            return Err(FrameError::NotControl);
        }
        serde_json::from_slice(&self.payload).map_err(|e| FrameError::BadJson(e.to_string()))
    }
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The header's kind byte is neither 1 nor 2.
    #[error("frame kind {0} is unknown (1 control, 2 data)")]
    UnknownKind(u8),
    /// The header's channel byte is unknown, or a control frame is not on channel 0.
    #[error("frame channel {0} is unknown or wrong for the frame kind")]
    BadChannel(u8),
    /// The payload length exceeds the limit for its kind ([`max_payload`]).
    #[error("frame of {len} bytes exceeds the {limit}-byte limit for its kind")]
    Oversized {
        /// Announced payload length.
        len: usize,
        /// The limit for the frame's kind.
        limit: usize,
    },
    /// The stream ended inside a frame.
    #[error("the stream ended inside a frame ({got} of {want} bytes)")]
    Truncated {
        /// Bytes received.
        got: usize,
        /// Bytes the header announced.
        want: usize,
    },
    /// A control payload is not a valid message.
    #[error("control message is not valid: {0}")]
    BadJson(String),
    /// A data frame where a control message was expected.
    #[error("expected a control frame")]
    NotControl,
    /// An I/O error.
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl FrameError {
    /// Whether the byte stream is still in sync after this error (a bad JSON payload is; a
    /// bad header, an oversized or truncated frame is not, and the connection must close).
    pub fn stream_usable(&self) -> bool {
        matches!(self, FrameError::BadJson(_) | FrameError::NotControl)
    }
}

fn parse_header(h: &[u8; HEADER_LEN]) -> Result<(FrameKind, Channel, usize), FrameError> {
    let kind = match h[0] {
        1 => FrameKind::Control,
        2 => FrameKind::Data,
        other => return Err(FrameError::UnknownKind(other)),
    };
    let channel = Channel::from_byte(h[1]).ok_or(FrameError::BadChannel(h[1]))?;
    if (kind == FrameKind::Control) != (channel == Channel::Control) {
        return Err(FrameError::BadChannel(h[1]));
    }
    let len = usize::try_from(u32::from_be_bytes([h[2], h[3], h[4], h[5]])).unwrap_or(usize::MAX);
    let limit = max_payload(kind);
    if len > limit {
        return Err(FrameError::Oversized { len, limit });
    }
    Ok((kind, channel, len))
}

/// Reads one frame from a blocking reader. `Ok(None)` is a clean end of stream (between
/// frames).
pub fn read_frame(r: &mut impl Read) -> Result<Option<Frame>, FrameError> {
    let mut header = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match r.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => {
                return Err(FrameError::Truncated {
                    got,
                    want: HEADER_LEN,
                })
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let (kind, channel, len) = parse_header(&header)?;
    let mut payload = vec![0u8; len];
    let mut got = 0;
    while got < len {
        match r.read(&mut payload[got..]) {
            Ok(0) => return Err(FrameError::Truncated { got, want: len }),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Some(Frame {
        kind,
        channel,
        payload,
    }))
}

/// Writes one frame to a blocking writer. A payload over the limit for its kind is refused
/// (`InvalidInput`) before anything is written: the peer would close the connection on it.
pub fn write_frame(w: &mut impl Write, frame: &Frame) -> io::Result<()> {
    let limit = max_payload(frame.kind);
    if frame.payload.len() > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            FrameError::Oversized {
                len: frame.payload.len(),
                limit,
            },
        ));
    }
    w.write_all(&frame.encode())
}

/// An incremental decoder for non-blocking readers: push bytes as they arrive, pop frames.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
}

impl FrameDecoder {
    /// A buffer grown past this capacity is let go of once the large control frame, or the
    /// stream of data frames, it was grown for is out.
    const LARGE_CAPACITY: usize = 128 * 1024;

    /// A decoder with an empty buffer.
    pub fn new() -> FrameDecoder {
        FrameDecoder::default()
    }

    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame, if the buffer holds one. A header error is returned as soon
    /// as the header is complete, so an oversized frame is never buffered.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        let Some(header) = self.buf.get(..HEADER_LEN) else {
            return Ok(None);
        };
        let mut h = [0u8; HEADER_LEN];
        h.copy_from_slice(header);
        let (kind, channel, len) = parse_header(&h)?;
        if self.buf.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let payload = self.buf[HEADER_LEN..HEADER_LEN + len].to_vec();
        self.buf.drain(..HEADER_LEN + len);
        // A buffer grown for a large control frame (a manifest, a part of its listings) or for
        // the data frames of a stream (an upload's, up to a few hundred KiB each) would
        // otherwise stay that big for the connection's life, through every iteration it runs.
        // It is shrunk to what it holds (the next frame's first bytes, if any): after a large
        // control frame, and at the empty frame that ends a stream, not after each of its data
        // frames, or it would be shrunk and grown again for each.
        let done_with_large = match kind {
            FrameKind::Control => len > Self::LARGE_CAPACITY,
            FrameKind::Data => len == 0,
        };
        if done_with_large && self.buf.capacity() > Self::LARGE_CAPACITY {
            self.buf.shrink_to_fit();
        }
        Ok(Some(Frame {
            kind,
            channel,
            payload,
        }))
    }

    /// Bytes received but not yet part of a complete frame (non-zero at end of stream means
    /// the peer stopped inside a frame).
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

/// A signal the host may send to the running agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum AgentSignal {
    /// SIGINT (an interrupt, like Ctrl-C).
    Sigint,
    /// SIGTERM (terminate).
    Sigterm,
    /// SIGKILL.
    Sigkill,
    /// SIGHUP.
    Sighup,
    /// SIGUSR1.
    Sigusr1,
    /// SIGUSR2.
    Sigusr2,
}

/// Owner of an uploaded tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

/// A request from the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// First message: the versions the host speaks.
    Hello {
        /// Correlation id.
        id: u64,
        /// Protocol versions the host supports.
        versions: Vec<u32>,
        /// Free-form client name and version.
        client: String,
    },
    /// Upload a directory tree: data frames on the tar channel follow, ended by an empty one.
    /// Unpacked into a root-owned staging directory, then renamed to `dest`.
    Upload {
        /// Correlation id.
        id: u64,
        /// Absolute destination inside the sandbox (replaced whole).
        dest: String,
        /// Owner for the unpacked tree (the agent's workspace); default root, which the agent
        /// cannot write (plugins, adapters).
        #[serde(default)]
        owner: Option<Owner>,
        /// The tree is offered first ([`crate::unpack::offer`]): its listing follows on channel
        /// 4, the supervisor answers `need`, and the tar stream holds only the files needed.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        offer: bool,
        /// The tar stream is compressed: `zstd` (one zstd frame; feature `upload.zstd`). The
        /// listing of an offered upload is not.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        compression: Option<String>,
        /// The offered listing named by its digest first (feature `upload.listing_digest`): the
        /// supervisor answers `need` at once when it holds exactly that listing for `dest`, else
        /// `send_listing`, and only then does the listing (or its delta) follow on channel 4.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        listing: Option<ListingDigest>,
    },
    /// Set the manifest for the following iterations.
    SetManifest {
        /// Correlation id.
        id: u64,
        /// The manifest.
        manifest: Box<Manifest>,
        /// The trees' per-file listings are not in the manifest (its trees' `files` and `dirs`
        /// are empty) but follow in `add_listing` requests, each a control frame of its own, so
        /// no listing is bound by [`MAX_CONTROL_PAYLOAD`] (feature `manifest.listings`). `run`
        /// is refused until every tree's last `add_listing` has come.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        listings_follow: bool,
    },
    /// Part of a tree's per-file listing, after a `set_manifest` with `listings_follow`: appended
    /// to what earlier `add_listing` requests for the tree sent.
    AddListing {
        /// Correlation id.
        id: u64,
        /// The tree's `name` in the manifest.
        tree: String,
        /// Files of the tree (`{path, sha256, size}`, as in a manifest's tree).
        #[serde(default)]
        files: crate::manifest::FileListing,
        /// Subdirectories of the tree.
        #[serde(default)]
        dirs: Vec<String>,
        /// This is the tree's last part.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        last: bool,
        /// Instead of `files` and `dirs`: the tree's listing is the offered listing the
        /// supervisor holds for the tree's `path`, whose SHA-256 is this (lowercase hex; feature
        /// `upload.listing_digest`). Refused unless the supervisor holds exactly that listing and
        /// it gives the tree's `sha256`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        held_listing: Option<String>,
    },
    /// Run one iteration with the current manifest; events, output and the result follow.
    Run {
        /// Correlation id.
        id: u64,
        /// Text appended to the manifest's prompt for this iteration only, after a blank line
        /// (the harness's `feedback:`: what the validation of the previous iteration said); at
        /// most [`MAX_FEEDBACK`] bytes, no NUL.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        feedback: Option<String>,
    },
    /// Send a signal to the running agent's process group.
    Signal {
        /// Correlation id.
        id: u64,
        /// The signal.
        signal: AgentSignal,
    },
    /// Cancel the running iteration (SIGTERM to the agent, KILL after the grace).
    Cancel {
        /// Correlation id.
        id: u64,
        /// Also end the run that holds the sandbox: its next `run` is refused with `stopped`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        run: bool,
    },
    /// Stream an iteration's record as tar on the tar channel.
    Collect {
        /// Correlation id.
        id: u64,
        /// Iteration number (default: the latest).
        #[serde(default)]
        iteration: Option<u32>,
    },
    /// State, history, processes and confinement; with `verify`, a live re-verification.
    Status {
        /// Correlation id.
        id: u64,
        /// Re-verify the current manifest now (refused while an iteration runs).
        #[serde(default)]
        verify: bool,
    },
    /// Stop the supervisor (kills everything, exits 0).
    Shutdown {
        /// Correlation id.
        id: u64,
    },
    /// Claim the sandbox for a run: only this connection may then `upload`, `set_manifest` and
    /// `run`, until it sends `release` (or closes, which leaves the claim orphaned for the same
    /// run to take back).
    Claim {
        /// Correlation id.
        id: u64,
        /// The host's run id.
        run: String,
        /// The host's plan for the run, kept and shown by `status` (JSON, at most 64 KiB).
        #[serde(default)]
        plan: Option<ClaimPlan>,
        /// How long the claim holds without a word from its connection, in milliseconds
        /// (default 60 s): past it the run counts as orphaned even if the connection stays open.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lease_ms: Option<u64>,
        /// This connection carries the agent's allowed connections (feature `network`): the
        /// supervisor sends it `tunnel_open` while an iteration of the run is under way.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        tunnel: bool,
    },
    /// Renew this connection's claim (any frame from the holder renews it; this one says
    /// nothing else).
    Renew {
        /// Correlation id.
        id: u64,
    },
    /// End this connection's claim.
    Release {
        /// Correlation id.
        id: u64,
    },
    /// The host holds the records of these iterations (they may be pruned or deleted).
    Collected {
        /// Correlation id.
        id: u64,
        /// The iterations.
        iterations: Vec<u32>,
    },
    /// The host dialled the connection a `tunnel_open` asked for: bytes may flow (feature
    /// `network`; no reply).
    TunnelOpened {
        /// The supervisor's connection id.
        conn: u32,
    },
    /// The host did not dial it (the policy, the address it resolved to, the dial failed).
    TunnelRefused {
        /// The supervisor's connection id.
        conn: u32,
        /// Why, one line.
        reason: String,
    },
    /// The host's side of a carried connection is gone: the supervisor closes its socket.
    TunnelClose {
        /// The connection id.
        conn: u32,
        /// Why, one line (`closed` for an orderly end).
        reason: String,
    },
    /// The host wrote `bytes` more of the connection's data to its socket: the supervisor may
    /// send that many more ([`tunnel::WINDOW`]).
    TunnelAck {
        /// The connection id.
        conn: u32,
        /// Bytes written since the last ack.
        bytes: u32,
    },
    /// The host put the value of these model credentials in place of their placeholders on a
    /// model connection (`tunnel_open` with `model`), each name said once per connection, for
    /// the record (feature `network.model`; no reply).
    TunnelInjected {
        /// The connection id.
        conn: u32,
        /// The credentials' variable names (never their values).
        names: Vec<String>,
    },
}

impl Request {
    /// The request's correlation id.
    pub fn id(&self) -> u64 {
        match self {
            Request::Hello { id, .. }
            | Request::Upload { id, .. }
            | Request::SetManifest { id, .. }
            | Request::AddListing { id, .. }
            | Request::Run { id, .. }
            | Request::Signal { id, .. }
            | Request::Cancel { id, .. }
            | Request::Collect { id, .. }
            | Request::Status { id, .. }
            | Request::Shutdown { id }
            | Request::Claim { id, .. }
            | Request::Release { id }
            | Request::Renew { id }
            | Request::Collected { id, .. } => *id,
            // Tunnel messages are answered by none: they carry no correlation id.
            Request::TunnelOpened { .. }
            | Request::TunnelRefused { .. }
            | Request::TunnelClose { .. }
            | Request::TunnelAck { .. }
            | Request::TunnelInjected { .. } => 0,
        }
    }
}

/// An offered listing named by its digest ([`Request::Upload`]'s `listing`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListingDigest {
    /// SHA-256 of the whole listing (lowercase hex).
    pub sha256: String,
    /// Its length in bytes.
    pub bytes: u64,
    /// Its number of lines (entries).
    pub lines: u64,
}

/// What the supervisor can do (sent in reply to `hello`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Whether the supervisor is PID 1 of its PID namespace.
    pub pid1: bool,
    /// `pid1`, `unprivileged` or `degraded`.
    pub mode: String,
    /// The kernel's Landlock ABI (0 when unavailable).
    pub landlock_abi: u32,
    /// How the agent runs: e.g. `uid 65534` or `uid from manifest`.
    pub uid_model: String,
    /// The user namespace the supervisor runs in, absent in the initial one (a rootless
    /// sandbox: uid 0 is the host user, the agent a subordinate id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_namespace: Option<crate::user_namespace::UserNamespace>,
    /// The only identity the agent can run as, when the supervisor cannot choose one (the
    /// unprivileged mode: its own uid, gid and groups). A host sets it as the manifest's `user`
    /// and as the workspace's owner; `set_manifest` with another user is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_user: Option<crate::manifest::AgentUser>,
    /// Requests this supervisor serves.
    pub requests: Vec<String>,
    /// The manifest fields and request options of this release a host may use ([`FEATURES`]);
    /// empty from a supervisor older than them, which would refuse or ignore them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
    /// The most one upload may hold (`serve --upload-max-entries`, `--upload-max-bytes`), so a
    /// host can refuse a tree over them before it sends anything; absent from older supervisors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_limits: Option<UploadLimits>,
}

impl Capabilities {
    /// Whether [`Capabilities::features`] names `feature`.
    pub fn has_feature(&self, feature: &str) -> bool {
        self.features.iter().any(|f| f == feature)
    }
}

/// The limits of one upload ([`Capabilities::upload_limits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadLimits {
    /// Most entries (files and directories, the tree's root not counted).
    pub max_entries: u64,
    /// Most bytes of file content.
    pub max_bytes: u64,
}

impl Default for UploadLimits {
    /// `pitcrew-init serve`'s defaults ([`crate::unpack::UnpackLimits`]).
    fn default() -> Self {
        let limits = crate::unpack::UnpackLimits::default();
        UploadLimits {
            max_entries: limits.max_entries,
            max_bytes: limits.max_bytes,
        }
    }
}

/// What [`Capabilities::features`] lists: `agent.tools-empty` (`agent.tools: []` gives no
/// built-in tools), `agent.record_prompt`, `agent.context_files` (`false`: none),
/// `agent.context_files.uploaded` (the choice of `uploaded`, the context files named in the
/// record, Claude Code given the workdir's `CLAUDE.md`), `dirs.home_keep` (and `HOME`,
/// `TMPDIR` emptied before each iteration), `output.keep_output` (and `output/` emptied),
/// `env.passed`, `env.runner` (the runner's per-run variables, `pitcrew run --runner-env`:
/// an older supervisor refuses the unknown field rather than dropping it, and the host refuses
/// first, naming it), `run.feedback`, `skills` (verified skills given to the runtime), `upload.offer`
/// (content-addressed uploads: `upload` with `offer`), `upload.zstd` (`upload` with
/// `compression: zstd`), `upload.listing_digest` (an offered upload names its listing by digest
/// first and sends it only when asked, as a delta against the one held; `add_listing` with
/// `held_listing`), `manifest.listings` (`set_manifest` with `listings_follow`, then
/// `add_listing`), `record.disk_budget` (a record's copies of what the agent left are bounded by
/// `limits.disk_bytes` too, [`crate::server::copy_budget_bytes`]: the host may bound its unpack
/// by it), `record.entry_cost` (each file and directory of those copies counts what a file
/// system allocates for it, [`crate::unpack::file_cost`]: the host may count them so too),
/// `network` (the manifest's `network` enforced, `claim` with `tunnel`, the tunnel messages and
/// channel 5, [`tunnel`]), `network.model` (the manifest's `model`: a model listener, `tunnel_open`
/// with `model`, `tunnel_injected`), `network.platform` (the manifest's `network` naming a
/// platform whose own policy holds the agent, its proxy required in the agent's environment),
/// `network.from-sandbox` (`allow … from: sandbox`: the supervisor dials the allowed
/// connections itself, the agent in a network namespace of its own; `network.namespace` and
/// the connections' `from` in the record),
/// `network.model.rewritten` (the manifest's `model.rewritten_models_json`: pi's pinned
/// `models.json` rewritten by the host, its model listener at the port the host chose).
pub const FEATURES: &[&str] = &[
    "agent.tools-empty",
    "agent.record_prompt",
    "agent.context_files",
    "agent.context_files.uploaded",
    "dirs.home_keep",
    "output.keep_output",
    "env.passed",
    "env.runner",
    "run.feedback",
    "skills",
    "upload.offer",
    "upload.zstd",
    "upload.listing_digest",
    "manifest.listings",
    "record.disk_budget",
    "record.entry_cost",
    "network",
    "network.model",
    "network.platform",
    "network.from-sandbox",
    "network.model.rewritten",
];

/// A message from the supervisor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Response {
    /// Reply to `hello`: the chosen version and capabilities.
    Hello {
        /// Correlation id.
        id: u64,
        /// The version both sides will speak.
        version: u32,
        /// Supervisor version string.
        supervisor: String,
        /// What it can do (boxed: the largest message by far, kept out of every other one's
        /// size).
        capabilities: Box<Capabilities>,
    },
    /// The files an offered upload must send: after its listing, before its tar stream.
    Need {
        /// Correlation id of the `upload` request.
        id: u64,
        /// How many files are needed.
        files: u64,
        /// Their bytes.
        bytes: u64,
        /// One bit per listed file, in listing order (bit `n % 8` of byte `n / 8`, least
        /// significant first), set when the file must be sent; hex.
        need: String,
    },
    /// The supervisor does not hold the listing an `upload` named by its digest: the host sends
    /// it on channel 4, as a delta against `chunks` (the chunks of the listing the supervisor
    /// holds for the destination, [`crate::unpack::offer::delta`]) or whole when they are empty.
    SendListing {
        /// Correlation id of the `upload` request.
        id: u64,
        /// The digest of each chunk of the listing held for the destination, in order (32 hex
        /// digits each: the first 16 bytes of the chunk's SHA-256).
        chunks: Vec<String>,
        /// Why the named listing was not taken as held.
        reason: String,
    },
    /// A request succeeded (with optional details).
    Ok {
        /// Correlation id.
        id: u64,
        /// Details: the request's [`OkReply`] type (e.g. [`detail::Uploaded`]).
        #[serde(default)]
        detail: OkDetail,
    },
    /// A request failed.
    Error {
        /// Correlation id (0 when the request could not be parsed).
        id: u64,
        /// Machine-readable kind.
        kind: ErrorKind,
        /// What went wrong, naming the field, entry or path.
        message: String,
    },
    /// A step of the running iteration started or ended.
    Event {
        /// Correlation id of the `run` request.
        id: u64,
        /// Iteration number.
        iteration: u32,
        /// The step.
        step: Step,
        /// Where it is (`started`, `finished`, ...).
        state: StepState,
        /// Step details (one [`StepDetail`] type per step and state).
        #[serde(default)]
        detail: EventDetail,
    },
    /// The iteration's result record (the last message of a `run`).
    Result {
        /// Correlation id of the `run` request.
        id: u64,
        /// Iteration number.
        iteration: u32,
        /// The result record (`docs/result-record.md`).
        record: Box<crate::result::IterationResult>,
        /// The host ended the run holding the sandbox (`cancel` with `run`): no further
        /// iteration will start, so the run ends here.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        run_stopped: bool,
    },
    /// The agent connected to an allowed endpoint: the host dials `host`:`port` and answers
    /// `tunnel_opened` or `tunnel_refused` (feature `network`; only to the connection holding
    /// the run's claim with `tunnel`).
    TunnelOpen {
        /// The supervisor's id for the connection (its data frames start with it).
        conn: u32,
        /// The host as the agent named it (a name, or an address literal; IPv6 unbracketed).
        host: String,
        /// The port.
        port: u16,
        /// A model connection (the manifest's `model`, feature `network.model`): `host`:`port`
        /// is the route's upstream; the host sends the requests on with the credentials in
        /// place of their placeholders, over TLS unless the route's base URL is `http://`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        model: bool,
    },
    /// The agent's side of a carried connection is gone, or the supervisor ended it.
    TunnelClose {
        /// The connection id.
        conn: u32,
        /// Why, one line (`closed` for an orderly end).
        reason: String,
    },
    /// The supervisor wrote `bytes` more of the connection's data to the agent's socket.
    TunnelAck {
        /// The connection id.
        conn: u32,
        /// Bytes written since the last ack.
        bytes: u32,
    },
    /// Reply to `status`.
    Status {
        /// Correlation id.
        id: u64,
        /// The status document (`docs/protocol.md`; boxed, as large as `hello`'s). Written
        /// through a JSON value, so its keys come in sorted order at every depth, as they did
        /// when the supervisor built it as one.
        #[serde(serialize_with = "as_json_value")]
        status: Box<StatusDoc>,
    },
}

/// Serializes `value` through a [`serde_json::Value`]: every object's keys sorted.
fn as_json_value<T: Serialize, S: serde::Serializer>(
    value: &T,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serde_json::to_value(value)
        .map_err(serde::ser::Error::custom)?
        .serialize(serializer)
}

impl Response {
    /// The correlation id: the request's it answers (0 for an error about a request that could
    /// not be parsed).
    pub fn id(&self) -> u64 {
        match self {
            Response::Hello { id, .. }
            | Response::Ok { id, .. }
            | Response::Need { id, .. }
            | Response::SendListing { id, .. }
            | Response::Error { id, .. }
            | Response::Event { id, .. }
            | Response::Result { id, .. }
            | Response::Status { id, .. } => *id,
            Response::TunnelOpen { .. }
            | Response::TunnelClose { .. }
            | Response::TunnelAck { .. } => 0,
        }
    }

    /// Whether this response answers request `id`: it carries `id`, or it is an error about a
    /// request the supervisor could not parse (id 0), which is the one this peer sent last.
    pub fn answers(&self, id: u64) -> bool {
        let rid = self.id();
        rid == id || (rid == 0 && matches!(self, Response::Error { .. }))
    }

    /// The `ok` answering request `id` with `reply` as its detail.
    pub fn ok<T: OkReply>(id: u64, reply: &T) -> Response {
        Response::Ok {
            id,
            detail: OkDetail::of(reply),
        }
    }
}

#[cfg(test)]
mod tests;
