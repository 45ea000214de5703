//! The long-lived mode of `pitcrew-init` (`serve`, the container entrypoint): PID 1 stays up,
//! reaps continuously and serves the control protocol ([`crate::protocol`],
//! `docs/protocol.md`) on a root-only Unix socket or on its own stdio.
//!
//! Single-threaded: one `poll` over the signalfd, the listening socket and the connections.
//! While an iteration runs, [`crate::iteration::run_iteration`] (the same code as
//! `pitcrew-init run`) drives the loop and calls back into the server through
//! [`IterationObserver`](crate::iteration::IterationObserver), which keeps accepting
//! connections, answering requests, streaming step events and the agent's output, and turning
//! `signal`/`cancel` into actions on the agent.
//!
//! This module holds the `Server` state, [`serve`] and the poll loop; the rest by concern:
//!
//! - `socket`: the control socket, its directory, accepting connections and peer checks.
//! - `conn`: one connection (framing, bounded writes, upload state).
//! - `dispatch`: frames taken from a connection and requests answered.
//! - `error`: why a request is refused ([`RequestError`], the wire `error` kinds).
//! - `listings`: the manifest's per-file listings kept on disk, and `add_listing`.
//! - `held`: the trees offered uploads put in place, with their listings, for later uploads to
//!   copy content from.
//! - `upload`: upload destinations, an offered tree's listing and `need`, the tar stream's
//!   frames; `upload_stream`: the thread that unpacks them as they arrive.
//! - `run`: one iteration for a `run` request, the observer callbacks and the finished record.
//! - `egress`: the agent's allowed connections under `network: allow` (mirrors of loopback
//!   endpoints, the `CONNECT` proxy), carried by the host that holds the run.
//! - `tail`: the agent's output streamed to the requester while it runs.
//! - `status`: the `status` reply (history, `/proc` processes, live verification).
//! - `claim`: which run the sandbox serves (one at a time), and which records the host holds.
//! - `records`: the iteration records kept in the sandbox until collected.
//! - `reserve`: room held for records on a disk the agent can fill, and records kept in memory
//!   when even that was not enough.
//! - `retention`: collected records deleted past the manifest's retention.
//! - [`attach`]: `pitcrew-init attach`, the stdio ↔ socket bridge.

pub mod attach;
mod claim;
mod conn;
mod dispatch;
mod egress;
mod error;
mod held;
mod listings;
mod records;
mod reserve;
mod retention;
mod run;
mod socket;
mod status;
mod tail;
mod upload;
mod upload_stream;

pub use error::RequestError;
pub use records::tar_dir as tar_record_dir;
pub use records::{copies_limit, copy_budget_bytes, COPIED_PARTS};
pub use socket::{peer_allowed, prepare_socket_dir};

use crate::exit_code;
use crate::iteration::{ObserverAction, Supervisor};
use crate::manifest::Manifest;
use crate::protocol::{Capabilities, Response};
use crate::result::ConfinementRecord;
use crate::sandbox::reap::reap_everything;
use crate::unpack::UnpackLimits;
use conn::Conn;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use run::Current;
use status::HistoryEntry;
use std::fs;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default control socket.
pub const DEFAULT_SOCKET: &str = "/run/pitcrew/control.sock";
/// Default records directory.
pub const DEFAULT_RECORDS: &str = "/var/lib/pitcrew/records";

/// The longest the idle loop sleeps without a reap pass.
const IDLE_WAIT: Duration = Duration::from_secs(1);

/// Every request this supervisor serves (sent in the capabilities).
pub const REQUESTS: [&str; 14] = [
    "hello",
    "upload",
    "set_manifest",
    "add_listing",
    "run",
    "signal",
    "cancel",
    "collect",
    "status",
    "shutdown",
    "claim",
    "release",
    "collected",
    "renew",
];

/// How to serve.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The control socket (ignored with `stdio`).
    pub socket: PathBuf,
    /// Where iteration records are kept.
    pub records: PathBuf,
    /// Serve exactly one connection on stdin/stdout instead of a socket.
    pub stdio: bool,
    /// Upload limits.
    pub limits: UnpackLimits,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            socket: PathBuf::from(DEFAULT_SOCKET),
            records: PathBuf::from(DEFAULT_RECORDS),
            stdio: false,
            limits: UnpackLimits::default(),
        }
    }
}

/// A `run` request accepted while idle, started by the loop once the request handling that
/// accepted it has returned.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PendingRun {
    /// The connection that asked for it.
    conn: u64,
    /// Correlation id of the `run` request (its events and result carry it).
    id: u64,
    /// Text appended to the prompt for this iteration (`run`'s `feedback`).
    feedback: Option<String>,
}

/// A `shutdown` request: the loop stops, reaps everything and then answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PendingShutdown {
    /// The connection that asked for it.
    conn: u64,
    /// Correlation id of the `shutdown` request.
    id: u64,
}

/// The server (everything but the [`Supervisor`] state, so both can be borrowed at once).
struct Server {
    /// The listening control socket (`None` with `stdio`).
    listener: Option<UnixListener>,
    /// The open connections.
    conns: Vec<Conn>,
    /// The id the next accepted connection gets.
    next_conn: u64,
    /// Where iteration records are kept.
    records: PathBuf,
    /// The control socket's path, removed at shutdown (`None` with `stdio`).
    socket: Option<PathBuf>,
    /// Serving one connection on stdin/stdout: the server stops when it closes.
    stdio: bool,
    /// Upload limits.
    limits: UnpackLimits,
    /// The manifest of the following iterations (`set_manifest`); its trees' listings are kept
    /// on disk (`listings`).
    manifest: Option<Manifest>,
    /// The trees' listings still arriving in `add_listing` requests.
    pending_listings: listings::PendingListings,
    /// The trees offered uploads put in place, with their listings.
    held: held::HeldTrees,
    /// The context files the run's workspace began with (`agent.context_files: uploaded`),
    /// taken after the first reap following the workspace's upload or the manifest.
    context_baseline: Option<crate::context_files::Baseline>,
    /// The iterations finished since the server started.
    history: Vec<HistoryEntry>,
    /// No connection and no iteration when `service` last looked.
    idle: bool,
    /// Finished iterations no longer in `history` (the oldest, beyond its bound).
    history_left_out: u64,
    /// The number of the last iteration (records kept from earlier runs count).
    last_iteration: u32,
    /// The running iteration.
    current: Option<Current>,
    /// How the last iteration was confined.
    last_confinement: Option<ConfinementRecord>,
    /// What this supervisor can do (sent in `hello` and `status`).
    capabilities: Capabilities,
    /// A `run` request waiting for the loop to start it.
    pending_run: Option<PendingRun>,
    /// Space held in the records directory for the next record.
    reserve: reserve::Reserve,
    /// Records the disk had no room for (answered and collectable from memory).
    unwritten: reserve::Unwritten,
    /// The run this sandbox serves.
    claim: Option<claim::Claim>,
    /// The iterations whose records the host holds (`collected`).
    collected: std::collections::BTreeSet<u32>,
    /// What retention deleted, and the sizes of the collected records kept.
    pruned: retention::Pruned,
    /// Actions on the agent requested since the last wake-up (`signal`, `cancel`, `shutdown`).
    actions: Vec<ObserverAction>,
    /// A `shutdown` request, answered once everything is reaped.
    shutdown: Option<PendingShutdown>,
    /// The running iteration's listeners and carried connections (`network: allow`).
    egress: Option<egress::Egress>,
    /// The agent's own network namespace for the iteration, when the sandbox's has a network
    /// and `egress`'s listeners are bound in it.
    agent_netns: Option<crate::sandbox::netns::AgentNamespace>,
    /// The id the next iteration's first carried connection gets: ids are never reused while
    /// the supervisor runs, so a host's late word about an earlier iteration's connection
    /// (a dial that finished after it ended) names none of a later one.
    egress_next_id: u32,
}

/// Serves until `shutdown` (or, with `stdio`, until the connection closes); then cancels and
/// reaps everything. Returns the process exit code.
pub fn serve(mut ctx: Supervisor, opts: ServeOptions) -> i32 {
    // Unprivileged: the parents of the records directory of our uid, held by descriptor (and
    // given the owner's rights back if an earlier agent took them) before anything uses them;
    // the directory itself once it has its own mode (0700).
    let parent = opts.records.parent().unwrap_or(Path::new("/"));
    if let Err(err) = ctx.owned_dirs.guard(parent) {
        crate::say!(
            "records directory {}: {err}: a layout the supervisor cannot protect from the \
             agent's uid",
            opts.records.display()
        );
        return exit_code::SUPERVISOR_FAILED;
    }
    if let Some(found) = ctx.restore_own_state() {
        tracing::warn!("own state set back at start: {found:?}");
    }
    if let Err(err) = records::create_private_dir(&opts.records) {
        crate::say!("records directory {}: {err}", opts.records.display());
        return exit_code::SUPERVISOR_FAILED;
    }
    if let Err(err) = ctx.owned_dirs.guard_own(&opts.records) {
        crate::say!("records directory {}: {err}", opts.records.display());
        return exit_code::SUPERVISOR_FAILED;
    }
    // Its entries too (`.collected`, read below), before anything reads them.
    if let Some(found) = ctx.restore_own_state() {
        tracing::warn!("own state set back at start: {found:?}");
    }
    // Canonical, to be compared with the agent's writable directories (opened without a link).
    match fs::canonicalize(&opts.records) {
        Ok(records) => ctx.supervisor_paths.push(records),
        Err(err) => {
            crate::say!("records directory {}: {err}", opts.records.display());
            return exit_code::SUPERVISOR_FAILED;
        }
    }
    let user_namespace = crate::user_namespace::current();
    let unprivileged = ctx.info.mode == crate::result::SupervisorMode::Unprivileged;
    let capabilities = Capabilities {
        pid1: ctx.info.pid1,
        mode: ctx.info.mode.name().into(),
        landlock_abi: crate::sandbox::confine::kernel_landlock_abi(),
        uid_model: status::uid_model(user_namespace.as_ref(), unprivileged),
        user_namespace,
        agent_user: unprivileged.then(status::own_identity),
        requests: REQUESTS.iter().map(|s| s.to_string()).collect(),
        features: crate::protocol::FEATURES
            .iter()
            .map(|s| s.to_string())
            .collect(),
        upload_limits: Some(crate::protocol::UploadLimits {
            max_entries: opts.limits.max_entries,
            max_bytes: opts.limits.max_bytes,
        }),
    };
    let collected = claim::read_collected(&opts.records);
    let mut server = Server {
        listener: None,
        conns: Vec::new(),
        next_conn: 1,
        records: opts.records.clone(),
        socket: None,
        stdio: opts.stdio,
        limits: opts.limits,
        manifest: None,
        pending_listings: Default::default(),
        held: held::HeldTrees::new(&opts.records),
        context_baseline: None,
        // Its whole capacity at once: entries never move, and what they hold is not scattered
        // over the heap among what each iteration frees (which would keep those pages).
        history: Vec::with_capacity(run::HISTORY_KEPT),
        idle: true,
        history_left_out: 0,
        // A collected record retention deleted still counts: numbers never restart.
        last_iteration: records::last_iteration(&opts.records)
            .max(collected.last().copied().unwrap_or(0)),
        current: None,
        last_confinement: None,
        capabilities,
        pending_run: None,
        reserve: reserve::Reserve::new(&opts.records),
        unwritten: reserve::Unwritten::default(),
        claim: None,
        collected,
        pruned: retention::Pruned::default(),
        actions: Vec::new(),
        shutdown: None,
        egress: None,
        agent_netns: None,
        egress_next_id: 1,
    };
    if opts.stdio {
        let pair = std::io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .and_then(|r| Ok((r, std::io::stdout().as_fd().try_clone_to_owned()?)));
        let conn = pair.and_then(|(r, w)| Conn::new(0, r, w, None));
        match conn {
            Ok(conn) => server.conns.push(conn),
            Err(err) => {
                crate::say!("serve --stdio: {err}");
                return exit_code::SUPERVISOR_FAILED;
            }
        }
    } else {
        match socket::bind(&opts.socket) {
            Ok(listener) => {
                tracing::info!("serve: listening on {}", opts.socket.display());
                server.listener = Some(listener);
                server.socket = Some(opts.socket.clone());
            }
            Err(err) => {
                crate::say!("serve: {err}");
                return exit_code::SUPERVISOR_FAILED;
            }
        }
    }

    loop {
        if server.shutdown.is_some() || (server.stdio && server.conns.is_empty()) {
            break;
        }
        let signalled = server.wait(&mut ctx, IDLE_WAIT);
        if signalled {
            tracing::info!("serve: SIGTERM/SIGINT while idle; shutting down");
            break;
        }
        ctx.reaper.reap(|_, _| {});
        server.service(&mut ctx);
        server.check_lease();
        server.actions.clear();
        if let Some(request) = server.pending_run.take() {
            server.run(&mut ctx, request);
        }
    }

    // Shutdown: nothing may outlive the supervisor's decision to stop.
    let limits = server
        .manifest
        .as_ref()
        .map(|m| m.limits.clone())
        .unwrap_or_default();
    ctx.spared.clear();
    reap_everything(
        &mut ctx,
        Duration::from_millis(limits.kill_grace_ms),
        Duration::from_millis(limits.reap_budget_ms),
    );
    // Records the disk had no room for: one last try, with the reserve given back.
    server.reserve.release();
    server.unwritten.flush();
    for n in server.unwritten.iterations() {
        tracing::error!(
            "record of iteration {n}: could not be written before shutdown (disk full)"
        );
    }
    if let Some(PendingShutdown { conn, id }) = server.shutdown.take() {
        if let Some(c) = server.conn_mut(conn) {
            c.send(&Response::ok(
                id,
                &crate::protocol::detail::ShutDown { stopped: true },
            ));
        }
    }
    if let Some(socket) = &server.socket {
        let _ = fs::remove_file(socket);
    }
    0
}

/// Seconds since the epoch (0 before it).
/// `d` in whole milliseconds, saturating.
impl Server {
    /// The connection with server-local id `id`, if still open.
    fn conn_mut(&mut self, id: u64) -> Option<&mut Conn> {
        self.conns.iter_mut().find(|c| c.id == id)
    }

    /// Polls the signalfd, the listener and the connections for at most `wait`. Returns
    /// whether SIGTERM or SIGINT arrived (only acted on while idle).
    fn wait(&mut self, ctx: &mut Supervisor, wait: Duration) -> bool {
        {
            let mut fds = vec![PollFd::new(ctx.signals.as_fd(), PollFlags::POLLIN)];
            fds.extend(
                self.fds()
                    .into_iter()
                    .map(|fd| PollFd::new(fd, PollFlags::POLLIN)),
            );
            let ms = u16::try_from(wait.as_millis()).unwrap_or(u16::MAX).max(1);
            let _ = poll(&mut fds, PollTimeout::from(ms));
        }
        let mut stop = false;
        while let Some(info) = ctx.signals.read_one() {
            let signo = i32::try_from(info.ssi_signo).unwrap_or(0);
            if signo == libc::SIGTERM || signo == libc::SIGINT {
                stop = true;
            }
        }
        stop
    }

    /// The descriptors to poll besides the signalfd: the listener and every connection still
    /// reading.
    fn fds(&self) -> Vec<BorrowedFd<'_>> {
        let mut fds = Vec::new();
        if let Some(l) = &self.listener {
            fds.push(l.as_fd());
        }
        fds.extend(self.conns.iter().filter(|c| !c.eof).map(Conn::read_fd));
        if let Some(egress) = &self.egress {
            fds.extend(egress.read_fds());
        }
        fds
    }

    /// The connection that carries the agent's connections: the claim's holder, when it said
    /// it carries them (`claim` with `tunnel`).
    fn tunnel_conn(&self) -> Option<u64> {
        let holder = self.claim_holder()?;
        self.conns
            .iter()
            .find(|c| c.id == holder && c.tunnel && !c.dead && !c.eof)
            .map(|c| c.id)
    }

    /// Moves the egress connections' bytes and sends what they have for the host.
    fn service_egress(&mut self) {
        let host = self.tunnel_conn();
        let Some(egress) = self.egress.as_mut() else {
            return;
        };
        egress.service(host.is_some());
        let frames = egress.take_outbox();
        self.send_tunnel(host, frames);
    }

    /// Sends `frames` to the tunnel's host; none there: its connections end.
    fn send_tunnel(&mut self, host: Option<u64>, frames: Vec<crate::protocol::Frame>) {
        if frames.is_empty() {
            return;
        }
        let conn = host.and_then(|id| self.conns.iter_mut().find(|c| c.id == id));
        match conn {
            Some(c) => {
                for frame in &frames {
                    c.send_frame(frame);
                }
            }
            None => {
                if let Some(egress) = self.egress.as_mut() {
                    egress.host_gone();
                }
            }
        }
    }

    /// Accepts, reads and answers everything that is ready; never blocks on input.
    fn service(&mut self, ctx: &mut Supervisor) {
        self.accept();
        for i in 0..self.conns.len() {
            if !self.conns[i].eof {
                let mut probe = [PollFd::new(self.conns[i].read_fd(), PollFlags::POLLIN)];
                let ready = poll(&mut probe, PollTimeout::ZERO).unwrap_or(0) > 0;
                if ready {
                    self.conns[i].fill();
                }
            }
            self.drain_frames(i, ctx);
        }
        self.service_egress();
        // Close finished connections (the requester of a running iteration stays until its
        // result is sent or a write fails).
        let running_conn = self.current.as_ref().and_then(|c| c.conn);
        let mut closed = Vec::new();
        self.conns.retain(|c| {
            let keep = !c.dead && (!c.eof || Some(c.id) == running_conn);
            if !keep {
                tracing::debug!("conn {}: closed", c.id);
                closed.push(c.id);
                // An offered upload cut off in its tar stream: its staged listing goes too.
                if let conn::Upload::Receiving {
                    held: Some(staged), ..
                } = &c.upload
                {
                    held::HeldTrees::discard(Some(staged.clone()));
                }
            }
            keep
        });
        // A connection at its end orphans its claim at once, even while it is kept for the
        // result of the iteration it started (that iteration still counts for the claim).
        closed.extend(self.conns.iter().filter(|c| c.eof || c.dead).map(|c| c.id));
        for id in closed {
            self.claim_holder_gone(id);
        }
        let idle = self.conns.is_empty() && self.current.is_none();
        if idle && !self.idle {
            // Nobody connected and nothing running (the last client left, or the iteration its
            // host had left ended): what the requests and iterations freed goes back to the
            // kernel while the sandbox waits.
            crate::sandbox::heap::release_freed_memory();
        }
        self.idle = idle;
        if let Some(cur) = self.current.as_mut() {
            if let Some(id) = cur.conn {
                if !self.conns.iter().any(|c| c.id == id) {
                    cur.conn = None;
                }
            }
        }
        ctx.spared = self
            .conns
            .iter()
            .filter_map(|c| c.peer_pid.filter(|p| *p > 1))
            .collect();
    }
}
