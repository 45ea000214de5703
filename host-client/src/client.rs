//! A blocking client of the control protocol (`pitcrew_core::protocol`, version 1) over any
//! `Read` + `Write` pair, typically the stdin/stdout of a spawned `pitcrew-init attach`.
//!
//! One request at a time: each helper sends its request and reads frames until the request's
//! final response. Responses carrying another request's id (a `cancel` sent from a Ctrl-C
//! handler through a [`Canceller`]) are skipped. Every error names the request it belongs to.

use pitcrew_core::manifest::Manifest;
use pitcrew_core::protocol::detail::{Cancelled, Claimed, Uploaded};
use pitcrew_core::protocol::status::ClaimStatus;
use pitcrew_core::protocol::{
    read_frame, write_frame, AgentSignal, Capabilities, Channel, ClaimPlan, ErrorKind, EventDetail,
    Frame, FrameError, FrameKind, ListingDigest, OkDetail, OkReply, Owner, Request, Response,
    StatusDoc, Step, StepState, MAX_PAYLOAD, PROTOCOL_VERSION,
};
use pitcrew_core::unpack::offer::delta;
use pitcrew_core::unpack::offer::host::{OfferListing, Offered, StreamedListing};
use pitcrew_core::unpack::offer::ABORT_LINE;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub mod tunnel;
pub mod upstream;

/// Size of the data frames the client sends (a quarter of the protocol's limit).
const DATA_FRAME: usize = MAX_PAYLOAD / 4;

/// About how many bytes of JSON one `add_listing` request carries: far below the control
/// frame's 32 MiB, and few enough requests for a million-file tree (about 20).
pub const LISTING_CHUNK_BYTES: usize = 8 << 20;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Reading or writing the byte stream failed (or a request was too large to send).
    #[error("{request}: connection to the sandbox failed: {source}")]
    Io {
        /// The request.
        request: String,
        /// The I/O error.
        source: io::Error,
    },
    /// The stream carried something that is not a valid frame.
    #[error("{request}: bad frame from the sandbox: {source}")]
    Frame {
        /// The request.
        request: String,
        /// The framing error.
        source: FrameError,
    },
    /// The sandbox closed the connection before the request's final response.
    #[error("{request}: the sandbox closed the connection before answering")]
    Closed {
        /// The request.
        request: String,
    },
    /// The supervisor answered with an `error` response.
    #[error("{request}: refused by the supervisor ({kind}): {message}")]
    Refused {
        /// The request.
        request: String,
        /// The error kind.
        kind: ErrorKind,
        /// The supervisor's message.
        message: String,
    },
    /// The supervisor answered with a message the request does not expect.
    #[error("{request}: unexpected answer from the supervisor: {what}")]
    Unexpected {
        /// The request.
        request: String,
        /// What arrived.
        what: String,
    },
    /// The supervisor speaks no protocol version this client does.
    #[error("hello: the supervisor chose protocol version {got}; this pitcrew speaks {PROTOCOL_VERSION}")]
    Version {
        /// The version the supervisor chose.
        got: u32,
    },
    /// The caller's own callback (a tar writer or reader) failed.
    #[error("{request}: {source}")]
    Local {
        /// The request.
        request: String,
        /// What failed on this side.
        source: anyhow::Error,
    },
}

impl ClientError {
    /// The error kind of a `Refused` error (`busy`, `not-found`, …).
    pub fn refused_kind(&self) -> Option<&ErrorKind> {
        match self {
            ClientError::Refused { kind, .. } => Some(kind),
            _ => None,
        }
    }
}

/// What the supervisor said in reply to `hello`.
#[derive(Debug, Clone)]
pub struct HelloReply {
    /// The protocol version both sides speak.
    pub version: u32,
    /// The supervisor's version string.
    pub supervisor: String,
    /// What it can do.
    pub capabilities: Capabilities,
}

/// Something that happened while an iteration ran.
#[derive(Debug)]
pub enum RunUpdate<'a> {
    /// A step started or finished.
    Event {
        /// Iteration number.
        iteration: u32,
        /// The step.
        step: &'a Step,
        /// Where it is (`started`, `finished`, ...).
        state: &'a StepState,
        /// Step details.
        detail: &'a EventDetail,
    },
    /// Agent output (channel 1 stdout, 2 stderr).
    Output {
        /// Which stream.
        channel: Channel,
        /// The bytes.
        bytes: &'a [u8],
    },
}

/// The end of a `run`: the iteration number and its result record.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// Iteration number.
    pub iteration: u32,
    /// The result record (`docs/result-record.md`).
    pub record: pitcrew_core::result::IterationResult,
    /// The host ended the run (`cancel --all`): no further iteration starts.
    pub run_stopped: bool,
}

/// Sends `cancel` (or a signal, or `renew`) from another thread while the owning [`Client`]
/// waits for a `run` to end or does anything else. Its responses are skipped by the client.
#[derive(Clone)]
pub struct Canceller<W: Write> {
    writer: Arc<Mutex<W>>,
    next_id: Arc<AtomicU64>,
}

impl<W: Write> Canceller<W> {
    /// Sends `cancel` for the running iteration.
    pub fn cancel(&self) -> io::Result<()> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        send(&self.writer, &Request::Cancel { id, run: false })
    }

    /// Sends `renew`: word for the claim's lease.
    pub fn renew(&self) -> io::Result<()> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        send(&self.writer, &Request::Renew { id })
    }
}

fn send<W: Write>(writer: &Mutex<W>, request: &Request) -> io::Result<()> {
    let mut w = writer
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    write_frame(&mut *w, &Frame::control(request))?;
    w.flush()
}

/// A blocking protocol client.
pub struct Client<R: Read, W: Write> {
    reader: R,
    writer: Arc<Mutex<W>>,
    next_id: Arc<AtomicU64>,
    /// The zstd level upload tar streams are compressed at (`None`: sent as they are).
    zstd_level: Option<i32>,
    /// An upload whose tar stream failed on this side and was left unended: the supervisor
    /// would take the next upload's frames for its own, so no other upload goes on this
    /// connection.
    unended: Option<String>,
    /// The listings this connection's offered uploads named by digest and put in place, by
    /// destination: a manifest tree at one of them names the listing instead of sending it
    /// (`add_listing` with `held_listing`).
    held_listings: std::collections::HashMap<String, String>,
    /// The agent's connections this host carries (`network: allow`), once asked to.
    tunnels: Option<Box<dyn tunnel::Carrier>>,
    /// The destinations the supervisor holds an offered listing for, as its `claim` answer
    /// named them, kept up to date with this connection's uploads (only the claiming connection
    /// uploads); `None` until a claim answered with them (an older supervisor, or no claim).
    supervisor_held: Option<std::collections::BTreeSet<String>>,
}

/// What arrived for the current request.
enum Incoming {
    Control(Response),
    Data(Channel, Vec<u8>),
}

impl<R: Read, W: Write> Client<R, W> {
    /// A client over `reader` (the supervisor's output) and `writer` (its input). Call
    /// [`Client::hello`] first.
    pub fn new(reader: R, writer: W) -> Self {
        Client {
            reader,
            writer: Arc::new(Mutex::new(writer)),
            next_id: Arc::new(AtomicU64::new(1)),
            zstd_level: None,
            unended: None,
            held_listings: std::collections::HashMap::new(),
            tunnels: None,
            supervisor_held: None,
        }
    }

    /// Compresses the tar streams of the following uploads with zstd at `level` (`None`: off).
    /// Only for a supervisor whose `hello` lists the `upload.zstd` feature.
    pub fn compress_uploads(&mut self, level: Option<i32>) {
        self.zstd_level = level;
    }

    /// A handle that can send `cancel` from another thread (a Ctrl-C handler).
    pub fn canceller(&self) -> Canceller<W> {
        Canceller {
            writer: Arc::clone(&self.writer),
            next_id: Arc::clone(&self.next_id),
        }
    }

    fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn send(&self, request: &Request, name: &str) -> Result<(), ClientError> {
        send(&self.writer, request).map_err(|source| ClientError::Io {
            request: name.to_string(),
            source,
        })
    }

    /// The next frame for request `id`: control messages for other ids are skipped.
    fn next(&mut self, id: u64, name: &str) -> Result<Incoming, ClientError> {
        loop {
            let frame = read_frame(&mut self.reader)
                .map_err(|source| match source {
                    FrameError::Io(source) => ClientError::Io {
                        request: name.to_string(),
                        source,
                    },
                    source => ClientError::Frame {
                        request: name.to_string(),
                        source,
                    },
                })?
                .ok_or_else(|| ClientError::Closed {
                    request: name.to_string(),
                })?;
            if frame.kind == FrameKind::Data {
                if frame.channel == Channel::Tunnel {
                    if let Some(t) = self.tunnels.as_mut() {
                        t.data(&frame.payload);
                    }
                    continue;
                }
                return Ok(Incoming::Data(frame.channel, frame.payload));
            }
            let response: Response = frame.json().map_err(|source| ClientError::Frame {
                request: name.to_string(),
                source,
            })?;
            if matches!(
                response,
                Response::TunnelOpen { .. }
                    | Response::TunnelClose { .. }
                    | Response::TunnelAck { .. }
            ) {
                if let Some(t) = self.tunnels.as_mut() {
                    t.message(response);
                }
                continue;
            }
            if !response.answers(id) {
                let rid = response.id();
                tracing::debug!("{name}: skipping a response for request {rid}: {response:?}");
                continue;
            }
            if let Response::Error { kind, message, .. } = response {
                return Err(ClientError::Refused {
                    request: name.to_string(),
                    kind,
                    message,
                });
            }
            return Ok(Incoming::Control(response));
        }
    }

    /// Reads until the `ok` of request `id`, refusing anything else.
    fn expect_ok(&mut self, id: u64, name: &str) -> Result<OkDetail, ClientError> {
        match self.next(id, name)? {
            Incoming::Control(Response::Ok { detail, .. }) => Ok(detail),
            other => Err(unexpected(name, &other)),
        }
    }

    /// Reads until the `ok` of request `id` and its detail as the request's reply `T`.
    fn expect_reply<T: OkReply>(&mut self, id: u64, name: &str) -> Result<T, ClientError> {
        let detail = self.expect_ok(id, name)?;
        detail.read().map_err(|e| ClientError::Unexpected {
            request: name.to_string(),
            what: format!("an ok whose detail does not read ({e}): {detail}"),
        })
    }

    /// Opens the session: offers protocol version 1 and checks the supervisor's choice.
    pub fn hello(&mut self) -> Result<HelloReply, ClientError> {
        let id = self.id();
        let name = "hello";
        self.send(
            &Request::Hello {
                id,
                versions: vec![PROTOCOL_VERSION],
                client: format!("pitcrew {}", env!("CARGO_PKG_VERSION")),
            },
            name,
        )?;
        match self.next(id, name)? {
            Incoming::Control(Response::Hello {
                version,
                supervisor,
                capabilities,
                ..
            }) => {
                if version != PROTOCOL_VERSION {
                    return Err(ClientError::Version { got: version });
                }
                Ok(HelloReply {
                    version,
                    supervisor,
                    capabilities: *capabilities,
                })
            }
            other => Err(unexpected(name, &other)),
        }
    }

    /// Uploads a tree to `dest` inside the sandbox: `write_tar` writes a tar stream, sent as data
    /// frames on the tar channel and ended by an empty one. Returns the supervisor's `ok` detail.
    pub fn upload(
        &mut self,
        dest: &str,
        owner: Option<Owner>,
        write_tar: impl FnOnce(&mut dyn Write) -> anyhow::Result<()>,
    ) -> Result<Uploaded, ClientError> {
        let (id, name) = self.start_upload(dest, owner, false, None)?;
        self.forget_held(dest);
        self.send_tar(id, &name, write_tar)
    }

    /// Whether an offered upload to `dest` names its listing by digest: the supervisor has
    /// `upload.listing_digest` (`by_digest`) and may hold a listing for `dest` (its `claim`
    /// answer named it, this connection put one there, or the supervisor did not say). Named,
    /// the listing is made whole before the `upload`; otherwise it can follow the `upload` as it
    /// is made ([`Client::upload_streamed`]).
    pub fn names_listing(&self, dest: &str, by_digest: bool) -> bool {
        by_digest
            && self
                .supervisor_held
                .as_ref()
                .is_none_or(|held| held.contains(dest))
    }

    /// An upload to `dest` begins: what was held there and below is replaced.
    fn forget_held(&mut self, dest: &str) {
        self.held_listings.retain(|d, _| !d.starts_with(dest));
        if let Some(held) = &mut self.supervisor_held {
            held.retain(|d| !d.starts_with(dest));
        }
    }

    /// An offered upload to `dest` put its tree in place with the listing of SHA-256 `sha256`:
    /// the supervisor holds it now, and with `by_digest` a manifest tree at `dest` names it.
    fn now_held(&mut self, dest: &str, sha256: &[u8; 32], by_digest: bool) {
        if let Some(held) = &mut self.supervisor_held {
            held.insert(dest.to_string());
        }
        if by_digest {
            self.held_listings
                .insert(dest.to_string(), hex::encode(sha256));
        }
    }

    /// Uploads a tree to `dest` by offering its listing first (the `upload.offer` feature):
    /// once the supervisor said which files it lacks, `write_tar` writes the tar stream of those
    /// (given the need bitmap). With `by_digest` (a supervisor with `upload.listing_digest`) the
    /// `upload` names the listing by its SHA-256 and the listing is sent only when the
    /// supervisor asks for it (`send_listing`), as a delta against the chunks it holds, unless
    /// its `claim` answer said it holds none for `dest` ([`Client::names_listing`]); else it
    /// follows the `upload` whole. Returns the supervisor's `ok` detail.
    pub fn upload_listed(
        &mut self,
        dest: &str,
        owner: Option<Owner>,
        listing: &OfferListing,
        by_digest: bool,
        write_tar: impl FnOnce(&mut dyn Write, &[u8]) -> anyhow::Result<()>,
    ) -> Result<Uploaded, ClientError> {
        let naming = self.names_listing(dest, by_digest);
        let named = naming.then(|| listing.named());
        let (id, name) = self.start_upload(dest, owner, true, named)?;
        self.forget_held(dest);
        // The chunks the supervisor holds, when the listing is to be sent (none: whole).
        let mut asked = (!naming).then(Vec::new);
        // At most: the delta, then the whole listing when the delta did not rebuild it.
        let mut sent = 0;
        let bitmap = loop {
            if let Some(chunks) = asked.take() {
                sent += 1;
                let recipe;
                let bytes = if chunks.is_empty() {
                    &listing.bytes
                } else {
                    recipe = delta::recipe(&listing.bytes, &chunks);
                    &recipe
                };
                let mut frames = FrameWriter {
                    writer: &self.writer,
                    channel: Channel::Listing,
                    buf: Vec::with_capacity(DATA_FRAME),
                    failed: false,
                };
                if let Err(source) = frames.write_all(bytes).and_then(|()| frames.finish()) {
                    // A refusal (the listing was too long, say) says more than the broken pipe.
                    if let Err(answer @ ClientError::Refused { .. }) = self.next(id, &name) {
                        return Err(answer);
                    }
                    return Err(ClientError::Io {
                        request: name,
                        source,
                    });
                }
            }
            match self.next(id, &name)? {
                Incoming::Control(Response::Need { need, .. }) => {
                    break hex::decode(&need).map_err(|e| ClientError::Unexpected {
                        request: name.clone(),
                        what: format!("a need bitmap that is not hex: {e}"),
                    })?;
                }
                Incoming::Control(Response::SendListing { chunks, reason, .. })
                    if naming && sent < 2 =>
                {
                    tracing::debug!(
                        "{name}: listing asked for ({} chunks held): {reason}",
                        chunks.len()
                    );
                    asked = Some(chunks);
                }
                other => return Err(unexpected(&name, &other)),
            }
        };
        let detail = self.send_tar(id, &name, |w| write_tar(w, &bitmap))?;
        self.now_held(dest, &listing.sha256, by_digest);
        Ok(detail)
    }

    /// Uploads a tree to `dest` by offering its listing first, the listing written by `list`
    /// after the `upload` as it is made (sent while the host still hashes the tree): for a
    /// supervisor that holds no listing for `dest`, or one without `upload.listing_digest`
    /// (`by_digest` false). Once the supervisor said which files it lacks, `write_tar` writes
    /// the tar stream of those. When `list` fails after it began, the listing is ended with the
    /// line every supervisor refuses ([`ABORT_LINE`]), so nothing is written in the sandbox and
    /// the connection stays usable; the error is `list`'s.
    pub fn upload_streamed(
        &mut self,
        dest: &str,
        owner: Option<Owner>,
        by_digest: bool,
        list: impl FnOnce(&mut dyn Write) -> anyhow::Result<StreamedListing>,
        write_tar: impl FnOnce(&mut dyn Write, &Offered, &[u8]) -> anyhow::Result<()>,
    ) -> Result<Uploaded, ClientError> {
        let (id, name) = self.start_upload(dest, owner, true, None)?;
        self.forget_held(dest);
        let mut frames = FrameWriter {
            writer: &self.writer,
            channel: Channel::Listing,
            buf: Vec::with_capacity(DATA_FRAME),
            failed: false,
        };
        let listed = list(&mut frames);
        let sent = match &listed {
            Ok(_) => frames.finish(),
            Err(err) if frames.failed => Err(io::Error::other(format!("{err:#}"))),
            Err(_) => frames.write_all(ABORT_LINE).and_then(|()| frames.finish()),
        };
        if let Err(source) = sent {
            // A refusal (the listing was too long, say) says more than the broken pipe.
            if let Err(answer @ ClientError::Refused { .. }) = self.next(id, &name) {
                return Err(answer);
            }
            return Err(ClientError::Io {
                request: name,
                source,
            });
        }
        let listed = match listed {
            Ok(listed) => listed,
            // The supervisor refuses the abandoned listing; what failed here is the news.
            Err(source) => {
                return Err(match self.next(id, &name) {
                    Err(ClientError::Refused { .. }) => ClientError::Local {
                        request: name,
                        source,
                    },
                    Err(other) => other,
                    Ok(other) => unexpected(&name, &other),
                })
            }
        };
        let bitmap = match self.next(id, &name)? {
            Incoming::Control(Response::Need { need, .. }) => {
                hex::decode(&need).map_err(|e| ClientError::Unexpected {
                    request: name.clone(),
                    what: format!("a need bitmap that is not hex: {e}"),
                })?
            }
            other => return Err(unexpected(&name, &other)),
        };
        let detail = self.send_tar(id, &name, |w| write_tar(w, &listed.offered, &bitmap))?;
        self.now_held(dest, &listed.sha256, by_digest);
        Ok(detail)
    }

    /// Sends an `upload` request; its id and the name errors give it.
    fn start_upload(
        &mut self,
        dest: &str,
        owner: Option<Owner>,
        offer: bool,
        listing: Option<ListingDigest>,
    ) -> Result<(u64, String), ClientError> {
        let name = format!("upload {dest}");
        if let Some(unended) = &self.unended {
            return Err(ClientError::Local {
                request: name,
                source: anyhow::anyhow!(
                    "{unended} failed on this side and its stream was left unended: a new \
                     connection is needed to upload again"
                ),
            });
        }
        let id = self.id();
        let request = Request::Upload {
            id,
            dest: dest.to_string(),
            owner,
            offer,
            compression: self.zstd_level.map(|_| "zstd".to_string()),
            listing,
        };
        self.send(&request, &name)?;
        Ok((id, name))
    }

    /// Sends the tar stream `write_tar` writes as data frames of request `id`, ended by an empty
    /// one, and waits for its `ok`.
    fn send_tar(
        &mut self,
        id: u64,
        name: &str,
        write_tar: impl FnOnce(&mut dyn Write) -> anyhow::Result<()>,
    ) -> Result<Uploaded, ClientError> {
        let name = name.to_string();
        let mut frames = FrameWriter {
            writer: &self.writer,
            channel: Channel::Tar,
            buf: Vec::with_capacity(DATA_FRAME),
            failed: false,
        };
        let written = match self.zstd_level {
            None => write_tar(&mut frames),
            Some(level) => (|| {
                let mut zstd = zstd::Encoder::new(&mut frames, level)?;
                write_tar(&mut zstd)?;
                zstd.finish()?;
                Ok(())
            })(),
        }
        .and_then(|()| Ok(frames.finish()?));
        if let Err(err) = written {
            // Sending failed: the supervisor may have refused the upload and closed the stream,
            // and its answer says more than our broken pipe. A failure on this side (a file
            // vanished) leaves the stream unended and is not waited on: the supervisor answers
            // only at the end frame, completes no tree from a stream the host did not end, and
            // drops it when the connection closes.
            if frames.failed {
                if let Err(answer @ ClientError::Refused { .. }) = self.expect_ok(id, &name) {
                    return Err(answer);
                }
            } else {
                self.unended = Some(name.clone());
            }
            return Err(ClientError::Local {
                request: name,
                source: err,
            });
        }
        self.expect_reply(id, &name)
    }

    /// Sets the manifest for the following iterations. With `listings_follow` (a supervisor
    /// with the feature `manifest.listings`) the trees' per-file listings leave the manifest and
    /// follow in `add_listing` requests of at most [`LISTING_CHUNK_BYTES`] each, so no listing
    /// is bound by one control frame.
    pub fn set_manifest(
        &mut self,
        manifest: &Manifest,
        listings_follow: bool,
    ) -> Result<(), ClientError> {
        let id = self.id();
        let name = "set_manifest";
        let sent = if listings_follow {
            manifest.without_listings()
        } else {
            manifest.clone()
        };
        self.send(
            &Request::SetManifest {
                id,
                manifest: Box::new(sent),
                listings_follow,
            },
            name,
        )?;
        self.expect_ok(id, name)?;
        if listings_follow {
            for tree in &manifest.trees {
                if let Some(digest) = self.held_listings.get(&tree.path).cloned() {
                    match self.add_held_listing(tree, digest) {
                        Ok(()) => continue,
                        // Not taken (the supervisor's own check refused it): sent in parts.
                        Err(ClientError::Refused { message, .. }) => {
                            tracing::debug!("add_listing {}: {message}", tree.name)
                        }
                        Err(other) => return Err(other),
                    }
                }
                self.add_listing(tree)?;
            }
        }
        Ok(())
    }

    /// Names the listing held for `tree`'s path as its listing (`add_listing` with
    /// `held_listing`).
    fn add_held_listing(
        &mut self,
        tree: &pitcrew_core::manifest::TreePin,
        digest: String,
    ) -> Result<(), ClientError> {
        let name = "add_listing";
        let id = self.id();
        self.send(
            &Request::AddListing {
                id,
                tree: tree.name.clone(),
                files: Default::default(),
                dirs: Vec::new(),
                last: true,
                held_listing: Some(digest),
            },
            name,
        )?;
        self.expect_ok(id, name).map(|_| ())
    }

    /// Sends `tree`'s listing in `add_listing` requests of at most [`LISTING_CHUNK_BYTES`].
    fn add_listing(&mut self, tree: &pitcrew_core::manifest::TreePin) -> Result<(), ClientError> {
        let name = "add_listing";
        let mut records = tree.files.records().peekable();
        let mut dirs = tree.dirs.iter().peekable();
        loop {
            let mut files = Vec::new();
            let mut chunk_dirs = Vec::new();
            let mut bytes = 0;
            while bytes < LISTING_CHUNK_BYTES {
                if let Some(record) = records.next() {
                    // `{"path":…,"sha256":…,"size":…}`: about 100 bytes around the path.
                    bytes += record.path.len() + 128;
                    files.push(record);
                } else if let Some(dir) = dirs.next() {
                    bytes += dir.len() + 4;
                    chunk_dirs.push(dir.clone());
                } else {
                    break;
                }
            }
            let last = records.peek().is_none() && dirs.peek().is_none();
            let files = pitcrew_core::manifest::FileListing::from_records(&files).map_err(|e| {
                ClientError::Local {
                    request: name.into(),
                    source: anyhow::anyhow!("tree {:?}: {e}", tree.name),
                }
            })?;
            let id = self.id();
            self.send(
                &Request::AddListing {
                    id,
                    tree: tree.name.clone(),
                    files,
                    dirs: chunk_dirs,
                    last,
                    held_listing: None,
                },
                name,
            )?;
            self.expect_ok(id, name)?;
            if last {
                return Ok(());
            }
        }
    }

    /// Runs one iteration, `feedback` appended to its prompt: `on_update` sees each event and
    /// each chunk of agent output; returns the result record.
    pub fn run(
        &mut self,
        feedback: Option<&str>,
        mut on_update: impl FnMut(RunUpdate<'_>),
    ) -> Result<RunOutcome, ClientError> {
        let id = self.id();
        let name = "run";
        let feedback = feedback.map(str::to_owned);
        self.send(&Request::Run { id, feedback }, name)?;
        loop {
            match self.next(id, name)? {
                Incoming::Data(channel, bytes) => on_update(RunUpdate::Output {
                    channel,
                    bytes: &bytes,
                }),
                Incoming::Control(Response::Event {
                    iteration,
                    step,
                    state,
                    detail,
                    ..
                }) => on_update(RunUpdate::Event {
                    iteration,
                    step: &step,
                    state: &state,
                    detail: &detail,
                }),
                Incoming::Control(Response::Result {
                    iteration,
                    record,
                    run_stopped,
                    ..
                }) => {
                    return Ok(RunOutcome {
                        iteration,
                        record: *record,
                        run_stopped,
                    })
                }
                other => return Err(unexpected(name, &other)),
            }
        }
    }

    /// Sends a signal to the running agent's process group.
    pub fn signal(&mut self, signal: AgentSignal) -> Result<(), ClientError> {
        let id = self.id();
        let name = format!("signal {signal:?}");
        self.send(&Request::Signal { id, signal }, &name)?;
        self.expect_ok(id, &name).map(|_| ())
    }

    /// Cancels the running iteration; with `run`, also ends the run that holds the sandbox (its
    /// next `run` is refused with `stopped`).
    pub fn cancel(&mut self, run: bool) -> Result<Cancelled, ClientError> {
        let id = self.id();
        self.send(&Request::Cancel { id, run }, "cancel")?;
        self.expect_reply(id, "cancel")
    }

    /// Collects an iteration's record (default: the latest) as a tar stream handed to
    /// `read_tar`; whatever `read_tar` leaves unread is drained so the session stays usable.
    pub fn collect<T>(
        &mut self,
        iteration: Option<u32>,
        read_tar: impl FnOnce(&mut dyn Read) -> anyhow::Result<T>,
    ) -> Result<T, ClientError> {
        let id = self.id();
        let name = match iteration {
            Some(n) => format!("collect iteration {n}"),
            None => "collect (latest iteration)".to_string(),
        };
        self.send(&Request::Collect { id, iteration }, &name)?;
        let mut reader = TarFrameReader {
            client: self,
            id,
            name: &name,
            chunk: Vec::new(),
            pos: 0,
            ended: false,
            failure: None,
        };
        let result = read_tar(&mut reader);
        // Drain to the end-of-stream frame, then take the failure that stopped the stream.
        while !reader.ended && reader.failure.is_none() {
            if reader.fill().is_err() {
                break;
            }
        }
        if let Some(err) = reader.failure.take() {
            return Err(err);
        }
        let value = result.map_err(|source| ClientError::Local {
            request: name.clone(),
            source,
        })?;
        self.expect_ok(id, &name)?;
        Ok(value)
    }

    /// Asks for the supervisor's status; with `verify`, a live re-verification.
    pub fn status(&mut self, verify: bool) -> Result<StatusDoc, ClientError> {
        let id = self.id();
        let name = "status";
        self.send(&Request::Status { id, verify }, name)?;
        match self.next(id, name)? {
            Incoming::Control(Response::Status { status, .. }) => Ok(*status),
            other => Err(unexpected(name, &other)),
        }
    }

    /// Claims the sandbox for the run `run` with the host's `plan` and a lease of `lease`
    /// (refused `busy` when another run holds it), saying whether this connection carries the
    /// agent's connections (`tunnel`, after [`Client::carry_connections`]); returns the claim as
    /// the supervisor keeps it.
    pub fn claim(
        &mut self,
        run: &str,
        plan: ClaimPlan,
        lease: std::time::Duration,
        tunnel: bool,
    ) -> Result<ClaimStatus, ClientError> {
        let id = self.id();
        let run = run.to_string();
        let lease_ms = Some(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX));
        self.send(
            &Request::Claim {
                id,
                run,
                plan: Some(plan),
                lease_ms,
                tunnel,
            },
            "claim",
        )?;
        let claimed: Claimed = self.expect_reply(id, "claim")?;
        self.supervisor_held = claimed.held_listings.map(|held| held.into_keys().collect());
        Ok(claimed.claim)
    }

    /// Ends this connection's claim.
    pub fn release(&mut self) -> Result<(), ClientError> {
        let id = self.id();
        self.send(&Request::Release { id }, "release")?;
        self.expect_ok(id, "release").map(|_| ())
    }

    /// Tells the supervisor the host holds the records of `iterations`.
    pub fn collected(&mut self, iterations: &[u32]) -> Result<(), ClientError> {
        let id = self.id();
        let iterations = iterations.to_vec();
        self.send(&Request::Collected { id, iterations }, "collected")?;
        self.expect_ok(id, "collected").map(|_| ())
    }

    /// Stops the supervisor (it kills everything and exits).
    pub fn shutdown(&mut self) -> Result<(), ClientError> {
        let id = self.id();
        self.send(&Request::Shutdown { id }, "shutdown")?;
        match self.expect_ok(id, "shutdown") {
            // The supervisor may exit before its answer is read.
            Ok(_) | Err(ClientError::Closed { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl<R: Read, W: Write + Send + 'static> Client<R, W> {
    /// From now on this client dials the connections the supervisor asks it to carry, under
    /// `policy` (checked again here), relaying each on threads of its own.
    pub fn carry_connections(
        &mut self,
        policy: pitcrew_core::manifest::NetworkPolicy,
        model: Option<tunnel::ModelUpstream>,
    ) {
        self.tunnels = Some(Box::new(tunnel::Tunnels::new(
            Arc::clone(&self.writer),
            policy,
            model,
        )));
    }
}

fn unexpected(name: &str, what: &Incoming) -> ClientError {
    let what = match what {
        Incoming::Control(r) => {
            let s = serde_json::to_string(r).unwrap_or_default();
            let mut s: String = s.chars().take(200).collect();
            if s.len() >= 200 {
                s.push('…');
            }
            s
        }
        Incoming::Data(ch, bytes) => format!("{} bytes of data on channel {ch:?}", bytes.len()),
    };
    ClientError::Unexpected {
        request: name.to_string(),
        what,
    }
}

/// Writes a byte stream as data frames on one channel (tar, or an offered upload's listing).
struct FrameWriter<'a, W: Write> {
    writer: &'a Mutex<W>,
    channel: Channel,
    buf: Vec<u8>,
    /// Sending a frame failed: the connection, not what the caller wrote, went wrong.
    failed: bool,
}

impl<W: Write> FrameWriter<'_, W> {
    fn flush_frame(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let payload = std::mem::replace(&mut self.buf, Vec::with_capacity(DATA_FRAME));
        self.send(payload, false)
    }

    fn send(&mut self, payload: Vec<u8>, flush: bool) -> io::Result<()> {
        let mut w = self
            .writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let sent = write_frame(&mut *w, &Frame::data(self.channel, payload)).and_then(|()| {
            if flush {
                w.flush()
            } else {
                Ok(())
            }
        });
        self.failed |= sent.is_err();
        sent
    }

    /// Sends what is buffered and the empty end-of-stream frame.
    fn finish(&mut self) -> io::Result<()> {
        self.flush_frame()?;
        self.send(Vec::new(), true)
    }
}

impl<W: Write> Write for FrameWriter<'_, W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let room = DATA_FRAME - self.buf.len();
        let n = data.len().min(room);
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == DATA_FRAME {
            self.flush_frame()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Reads the tar channel's data frames of a `collect` as one byte stream.
struct TarFrameReader<'a, 'n, R: Read, W: Write> {
    client: &'a mut Client<R, W>,
    id: u64,
    name: &'n str,
    chunk: Vec<u8>,
    pos: usize,
    ended: bool,
    failure: Option<ClientError>,
}

impl<R: Read, W: Write> TarFrameReader<'_, '_, R, W> {
    /// Reads the next frame into `chunk`; sets `ended` at the empty frame.
    fn fill(&mut self) -> io::Result<()> {
        match self.client.next(self.id, self.name) {
            Ok(Incoming::Data(Channel::Tar, bytes)) => {
                if bytes.is_empty() {
                    self.ended = true;
                }
                self.chunk = bytes;
                self.pos = 0;
                Ok(())
            }
            Ok(other) => {
                let err = unexpected(self.name, &other);
                let msg = err.to_string();
                self.failure = Some(err);
                Err(io::Error::other(msg))
            }
            Err(err) => {
                let msg = err.to_string();
                self.failure = Some(err);
                Err(io::Error::other(msg))
            }
        }
    }
}

impl<R: Read, W: Write> Read for TarFrameReader<'_, '_, R, W> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.pos < self.chunk.len() {
                let n = out.len().min(self.chunk.len() - self.pos);
                out[..n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
                self.pos += n;
                return Ok(n);
            }
            if self.ended || self.failure.is_some() {
                return Ok(0);
            }
            self.fill()?;
        }
    }
}

#[cfg(test)]
mod tests;
