//! The long-lived mode of `pitcrew-init` (`serve`, the container entrypoint): PID 1 stays up,
//! reaps continuously and serves the control protocol ([`crate::protocol`],
//! `docs/protocol.md`) on a root-only Unix socket or on its own stdio.
//!
//! Single-threaded: one `poll` over the signalfd, the listening socket and the connections.
//! While an iteration runs, [`crate::iteration::run_iteration`] (the same code as
//! `pitcrew-init run`) drives the loop and calls back into the server through
//! [`IterationObserver`], which keeps accepting connections, answering requests, streaming step
//! events and the agent's output, and turning `signal`/`cancel` into actions on the agent.
//!
//! - [`conn`]: one connection (framing, bounded writes, upload state).
//! - [`records`]: the iteration records kept in the sandbox until collected.
//! - [`attach`]: `pitcrew-init attach`, the stdio ↔ socket bridge.

pub mod attach;
mod conn;
mod records;

use crate::exit_code;
use crate::iteration::{run_iteration, IterationObserver, ObserverAction, Supervisor};
use crate::manifest::Manifest;
use crate::protocol::{
    AgentSignal, Capabilities, Channel, Frame, FrameKind, Request, Response, PROTOCOL_VERSION,
};
use crate::result::{ConfinementRecord, IterationResult};
use crate::sandbox::nofollow;
use crate::sandbox::reap::{parse_stat_ppid, proc_pids, reap_everything};
use crate::unpack::{unpack_tar, UnpackError, UnpackLimits};
use conn::{Conn, TarFrames, Upload};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use serde_json::{json, Value};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// Default control socket.
pub const DEFAULT_SOCKET: &str = "/run/pitcrew/control.sock";
/// Default records directory.
pub const DEFAULT_RECORDS: &str = "/var/lib/pitcrew/records";

/// The longest the loop sleeps while an iteration runs (output streams at least this often).
const ITERATION_WAIT: Duration = Duration::from_millis(50);
/// The longest the idle loop sleeps without a reap pass.
const IDLE_WAIT: Duration = Duration::from_secs(1);
/// Bytes of agent output read (and sent as one data frame) at a time.
const TAIL_CHUNK: usize = 64 * 1024;
/// Most bytes of one output stream sent per wake-up while the agent runs. Output that grows
/// faster is sent over the next wake-ups, which come without waiting,
/// so the supervise loop keeps enforcing the timeout and serving `cancel`, signals and
/// connections in between.
const TAIL_BUDGET: u64 = 1 << 20;
/// Most bytes of one output stream sent to the host per iteration: the same 1 GiB the record
/// keeps of it ([`records::STREAM_CAP_BYTES`], the capture's cap). Past it the stream stops
/// with an `output`/`truncated` event.
const STREAM_CAP: u64 = records::STREAM_CAP_BYTES;

/// Every request this supervisor serves (sent in the capabilities).
pub const REQUESTS: [&str; 9] = [
    "hello",
    "upload",
    "set_manifest",
    "run",
    "signal",
    "cancel",
    "collect",
    "status",
    "shutdown",
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

/// Whether a peer with this uid may use the control socket (only root).
pub fn peer_allowed(uid: u32) -> Result<(), String> {
    if uid == 0 {
        Ok(())
    } else {
        Err(format!(
            "the control socket is for root only (peer uid {uid})"
        ))
    }
}

/// Creates the socket's parent directory 0700 root-owned, or checks an existing one is exactly
/// that (a directory, owned by us, mode 0700).
pub fn prepare_socket_dir(dir: &Path) -> Result<(), String> {
    match fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent() {
                fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
            }
            fs::DirBuilder::new()
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("{}: {e}", dir.display()))?;
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
                .map_err(|e| format!("{}: {e}", dir.display()))
        }
        Err(e) => Err(format!("{}: {e}", dir.display())),
        Ok(meta) => {
            let euid = nix::unistd::geteuid().as_raw();
            if !meta.is_dir() || meta.uid() != euid || meta.mode() & 0o7777 != 0o700 {
                Err(format!(
                    "control socket directory {} must be a directory owned by uid {euid} with mode 0700 (found {}, uid {}, mode {:o})",
                    dir.display(),
                    if meta.is_dir() { "a directory" } else { "not a directory" },
                    meta.uid(),
                    meta.mode() & 0o7777
                ))
            } else {
                Ok(())
            }
        }
    }
}

fn bind(socket: &Path) -> Result<UnixListener, String> {
    let dir = socket
        .parent()
        .ok_or_else(|| format!("{}: no parent directory", socket.display()))?;
    prepare_socket_dir(dir)?;
    match fs::symlink_metadata(socket) {
        Ok(meta) if meta.file_type().is_socket_like() => {
            fs::remove_file(socket).map_err(|e| format!("{}: {e}", socket.display()))?
        }
        Ok(_) => return Err(format!("{} exists and is not a socket", socket.display())),
        Err(_) => {}
    }
    // Bind and listen under a temporary name, then rename: the socket appears at its path only
    // once it accepts connections (binding in place leaves a window between bind and listen in
    // which a client that saw the file gets ECONNREFUSED).
    let staging = dir.join(format!(".control.{}.sock", std::process::id()));
    let _ = fs::remove_file(&staging);
    let listener =
        UnixListener::bind(&staging).map_err(|e| format!("{}: {e}", staging.display()))?;
    let ready = fs::set_permissions(&staging, fs::Permissions::from_mode(0o600))
        .and_then(|()| listener.set_nonblocking(true))
        .and_then(|()| fs::rename(&staging, socket));
    if let Err(e) = ready {
        let _ = fs::remove_file(&staging);
        return Err(format!("{}: {e}", socket.display()));
    }
    Ok(listener)
}

trait SocketLike {
    fn is_socket_like(&self) -> bool;
}

impl SocketLike for fs::FileType {
    fn is_socket_like(&self) -> bool {
        std::os::unix::fs::FileTypeExt::is_socket(self)
    }
}

/// One finished iteration, for `status`.
#[derive(Debug, Clone, serde::Serialize)]
struct HistoryEntry {
    iteration: u32,
    exit_code: i32,
    meaning: String,
    reason: Option<String>,
    started_at: u64,
    duration_ms: u64,
}

/// Follows one output file of the running agent.
#[derive(Debug)]
struct Tail {
    path: PathBuf,
    channel: Channel,
    file: Option<File>,
    /// Bytes sent so far.
    sent: u64,
    /// Most bytes ever sent ([`STREAM_CAP`]).
    cap: u64,
    /// The cap was reached with more output behind it: nothing more is sent.
    truncated: bool,
}

/// What one [`Tail::pump`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pumped {
    /// Everything written so far was sent (or the stream was truncated earlier).
    CaughtUp,
    /// The budget ran out before the end of the file.
    Behind,
    /// The cap was reached now with more output behind it: the stream stops here.
    Truncated,
}

impl Tail {
    fn new(path: PathBuf, channel: Channel) -> Tail {
        Tail {
            path,
            channel,
            file: None,
            sent: 0,
            cap: STREAM_CAP,
            truncated: false,
        }
    }

    /// At most `max` (and [`TAIL_CHUNK`]) new bytes (empty when none).
    fn next_chunk(&mut self, max: u64) -> Vec<u8> {
        if self.file.is_none() {
            self.file = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&self.path)
                .ok();
        }
        let Some(file) = self.file.as_mut() else {
            return Vec::new();
        };
        let len = usize::try_from(max).map_or(TAIL_CHUNK, |m| m.min(TAIL_CHUNK));
        let mut buf = vec![0u8; len];
        match file.read(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                buf
            }
            Err(_) => Vec::new(),
        }
    }

    /// Hands up to `budget` new bytes to `send`, in chunks, never more than `cap` in all.
    fn pump(&mut self, budget: u64, mut send: impl FnMut(Channel, &[u8])) -> Pumped {
        let mut left = budget;
        while !self.truncated {
            if self.sent >= self.cap {
                // Only output beyond the cap truncates the stream (one byte tells).
                if self.next_chunk(1).is_empty() {
                    return Pumped::CaughtUp;
                }
                self.truncated = true;
                return Pumped::Truncated;
            }
            if left == 0 {
                return Pumped::Behind;
            }
            let chunk = self.next_chunk(left.min(self.cap - self.sent));
            if chunk.is_empty() {
                return Pumped::CaughtUp;
            }
            let n = chunk.len() as u64;
            left -= n;
            self.sent += n;
            send(self.channel, &chunk);
        }
        Pumped::CaughtUp
    }
}

/// The running iteration.
#[derive(Debug)]
struct Current {
    /// The connection that asked for it (gone = `None`).
    conn: Option<u64>,
    id: u64,
    iteration: u32,
    events: Option<File>,
    tails: Vec<Tail>,
    /// A tail has more output than the last pump sent: the loop should come back at once.
    behind: bool,
}

/// The server (everything but the [`Supervisor`] state, so both can be borrowed at once).
struct Server {
    listener: Option<UnixListener>,
    conns: Vec<Conn>,
    next_conn: u64,
    records: PathBuf,
    socket: Option<PathBuf>,
    stdio: bool,
    limits: UnpackLimits,
    manifest: Option<Manifest>,
    history: Vec<HistoryEntry>,
    last_iteration: u32,
    current: Option<Current>,
    last_confinement: Option<ConfinementRecord>,
    capabilities: Capabilities,
    pending_run: Option<(u64, u64)>,
    actions: Vec<ObserverAction>,
    shutdown: Option<(u64, u64)>,
}

/// Serves until `shutdown` (or, with `stdio`, until the connection closes); then cancels and
/// reaps everything. Returns the process exit code.
pub fn serve(mut ctx: Supervisor, opts: ServeOptions) -> i32 {
    if let Err(err) = records::create_private_dir(&opts.records) {
        eprintln!(
            "pitcrew-init: records directory {}: {err}",
            opts.records.display()
        );
        return exit_code::SUPERVISOR_FAILED;
    }
    let user_namespace = crate::user_namespace::current();
    let capabilities = Capabilities {
        pid1: ctx.info.pid1,
        mode: match ctx.info.mode {
            crate::result::SupervisorMode::Pid1 => "pid1".into(),
            crate::result::SupervisorMode::Degraded => "degraded".into(),
        },
        landlock_abi: crate::sandbox::confine::kernel_landlock_abi(),
        uid_model: uid_model(user_namespace.as_ref()),
        user_namespace,
        requests: REQUESTS.iter().map(|s| s.to_string()).collect(),
    };
    let mut server = Server {
        listener: None,
        conns: Vec::new(),
        next_conn: 1,
        records: opts.records.clone(),
        socket: None,
        stdio: opts.stdio,
        limits: opts.limits,
        manifest: None,
        history: Vec::new(),
        last_iteration: records::last_iteration(&opts.records),
        current: None,
        last_confinement: None,
        capabilities,
        pending_run: None,
        actions: Vec::new(),
        shutdown: None,
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
                eprintln!("pitcrew-init: serve --stdio: {err}");
                return exit_code::SUPERVISOR_FAILED;
            }
        }
    } else {
        match bind(&opts.socket) {
            Ok(listener) => {
                tracing::info!("serve: listening on {}", opts.socket.display());
                server.listener = Some(listener);
                server.socket = Some(opts.socket.clone());
            }
            Err(err) => {
                eprintln!("pitcrew-init: serve: {err}");
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
        server.actions.clear();
        if let Some((conn, id)) = server.pending_run.take() {
            server.run(&mut ctx, conn, id);
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
    if let Some((conn, id)) = server.shutdown.take() {
        if let Some(c) = server.conn_mut(conn) {
            c.send(&Response::Ok {
                id,
                detail: json!({"stopped": true}),
            });
        }
    }
    if let Some(socket) = &server.socket {
        let _ = fs::remove_file(socket);
    }
    0
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn signal_number(s: AgentSignal) -> i32 {
    match s {
        AgentSignal::Sigint => libc::SIGINT,
        AgentSignal::Sigterm => libc::SIGTERM,
        AgentSignal::Sigkill => libc::SIGKILL,
        AgentSignal::Sighup => libc::SIGHUP,
        AgentSignal::Sigusr1 => libc::SIGUSR1,
        AgentSignal::Sigusr2 => libc::SIGUSR2,
    }
}

/// Checks an upload destination: absolute, UTF-8 by construction, no `.`/`..`, not `/`.
fn check_dest(dest: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(dest);
    if !path.is_absolute() {
        return Err(format!("dest {dest:?} must be an absolute path"));
    }
    if path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(format!("dest {dest:?} must not contain `.` or `..`"));
    }
    if path.parent().is_none() {
        return Err("dest must not be /".to_string());
    }
    if dest.contains(['\n', '\r', '\\', '\0']) {
        return Err(format!("dest {dest:?} contains a refused character"));
    }
    Ok(path)
}

/// Best-effort `id` of a control payload that did not parse as a request.
fn salvage_id(payload: &[u8]) -> u64 {
    serde_json::from_slice::<Value>(payload)
        .ok()
        .and_then(|v| v.get("id").and_then(Value::as_u64))
        .unwrap_or(0)
}

/// How uids are used, for `hello`.
fn uid_model(ns: Option<&crate::user_namespace::UserNamespace>) -> String {
    let base = "supervisor and uploads root; agent as the manifest's user (default 65534:65534)";
    match ns {
        None => base.to_string(),
        Some(ns) => format!("{base}; rootless, in a user namespace: {}", ns.describe()),
    }
}

/// The processes of the sandbox, from `/proc`.
///
/// Bounded, since the agent decides how many processes there are and how long their command
/// lines are: at most [`STATUS_PROCESSES`] processes, [`STATUS_CMDLINE_BYTES`] of each command
/// line (a `status` reply stays far below the 32 MiB control frame).
fn processes() -> Vec<Value> {
    let mut pids = proc_pids();
    pids.sort_unstable();
    let total = pids.len();
    let mut listed: Vec<Value> = pids
        .into_iter()
        .take(STATUS_PROCESSES)
        .filter_map(|pid| {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid = parse_stat_ppid(&stat);
            let uid = fs::read_to_string(format!("/proc/{pid}/status"))
                .ok()
                .and_then(|s| {
                    s.lines().find(|l| l.starts_with("Uid:")).and_then(|l| {
                        l.split_whitespace()
                            .nth(1)
                            .and_then(|v| v.parse::<u32>().ok())
                    })
                });
            let mut cmdline = Vec::new();
            if let Ok(f) = fs::File::open(format!("/proc/{pid}/cmdline")) {
                let _ = f
                    .take(STATUS_CMDLINE_BYTES as u64)
                    .read_to_end(&mut cmdline);
            }
            let cmd = String::from_utf8_lossy(&cmdline)
                .trim_end_matches('\0')
                .replace('\0', " ");
            Some(json!({"pid": pid, "ppid": ppid, "uid": uid, "cmd": cmd}))
        })
        .collect();
    if total > STATUS_PROCESSES {
        listed.push(json!({"more": total - STATUS_PROCESSES}));
    }
    listed
}

/// Most processes listed by `status`.
const STATUS_PROCESSES: usize = 2000;
/// Most bytes of one process's command line in `status`.
const STATUS_CMDLINE_BYTES: usize = 4096;

/// The agent's directories in the order they are prepared: `workdir`, then every `dirs.*`
/// the manifest sets.
fn agent_dirs(manifest: &Manifest) -> Vec<&str> {
    let dirs = &manifest.dirs;
    [
        Some(&manifest.workdir),
        dirs.home.as_ref(),
        dirs.tmp.as_ref(),
        dirs.config.as_ref(),
        dirs.sessions.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(String::as_str)
    .collect()
}

/// Ensures every agent directory of `manifest` exists as a directory owned by the agent:
/// missing ones are created 0700 (parents as root 0755), existing ones are chowned (the
/// directory itself, not its contents). No symlink is followed in any component.
///
/// Something other than a directory where one belongs (a symlink, a file) is what an earlier
/// agent left in its own space, so it is removed (`unlinkat`, not followed) and replaced by a
/// directory — but only when the entry lies in an agent directory; in any other place it is the
/// host's doing and the iteration is refused. Returns what was replaced.
fn ensure_agent_dirs(manifest: &Manifest) -> Result<Vec<nofollow::Replaced>, String> {
    let dirs = agent_dirs(manifest);
    let agent_writable = |parent: &Path| dirs.iter().any(|d| parent.starts_with(d));
    let uid = rustix::fs::Uid::from_raw_unchecked(manifest.user.uid);
    let gid = rustix::fs::Gid::from_raw_unchecked(manifest.user.gid);
    let mut replaced = Vec::new();
    for dir in &dirs {
        let (fd, mut r) = nofollow::ensure_dir(Path::new(dir), &agent_writable)?;
        replaced.append(&mut r);
        // `fchownat(fd, "", AT_EMPTY_PATH)`: the directory just walked to, not a path.
        rustix::fs::chownat(
            &fd,
            "",
            Some(uid),
            Some(gid),
            rustix::fs::AtFlags::EMPTY_PATH,
        )
        .map_err(|e| format!("{dir}: chown: {e}"))?;
    }
    Ok(replaced)
}

impl Server {
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

    fn fds(&self) -> Vec<BorrowedFd<'_>> {
        let mut fds = Vec::new();
        if let Some(l) = &self.listener {
            fds.push(l.as_fd());
        }
        fds.extend(self.conns.iter().filter(|c| !c.eof).map(Conn::read_fd));
        fds
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
        // Close finished connections (the requester of a running iteration stays until its
        // result is sent or a write fails).
        let running_conn = self.current.as_ref().and_then(|c| c.conn);
        self.conns.retain(|c| {
            let keep = !c.dead && (!c.eof || Some(c.id) == running_conn);
            if !keep {
                tracing::debug!("conn {}: closed", c.id);
            }
            keep
        });
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

    fn accept(&mut self) {
        let Some(listener) = &self.listener else {
            return;
        };
        loop {
            let stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    tracing::warn!("serve: accept: {e}");
                    return;
                }
            };
            let id = self.next_conn;
            self.next_conn += 1;
            let cred =
                nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials);
            let (uid, pid) = match cred {
                Ok(c) => (c.uid(), c.pid()),
                Err(err) => {
                    tracing::warn!("serve: SO_PEERCRED: {err}; connection refused");
                    continue;
                }
            };
            let write: Result<OwnedFd, _> = stream.try_clone().map(OwnedFd::from);
            let conn = write.and_then(|w| Conn::new(id, OwnedFd::from(stream), w, Some(pid)));
            let mut conn = match conn {
                Ok(conn) => conn,
                Err(err) => {
                    tracing::warn!("serve: connection setup: {err}");
                    continue;
                }
            };
            if let Err(why) = peer_allowed(uid) {
                tracing::warn!("serve: {why}; refused");
                conn.error(0, "refused", why);
                continue;
            }
            tracing::debug!("conn {id}: accepted (pid {pid}, fd {})", conn.raw());
            self.conns.push(conn);
        }
    }

    /// Handles every complete frame of connection `i`.
    fn drain_frames(&mut self, i: usize, ctx: &mut Supervisor) {
        loop {
            if self.conns[i].dead {
                return;
            }
            let frame = match self.conns[i].decoder.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(err) => {
                    let c = &mut self.conns[i];
                    c.error(0, "malformed", err.to_string());
                    c.dead = true;
                    return;
                }
            };
            match frame.kind {
                FrameKind::Data => self.on_data(i, frame),
                FrameKind::Control => self.on_control(i, &frame, ctx),
            }
        }
        let c = &mut self.conns[i];
        if c.eof && c.decoder.pending() > 0 {
            let pending = c.decoder.pending();
            c.error(
                0,
                "malformed",
                format!("the stream ended inside a frame ({pending} bytes pending)"),
            );
            c.dead = true;
        }
    }

    fn on_data(&mut self, i: usize, frame: Frame) {
        let max_spool = self
            .limits
            .max_bytes
            .saturating_add(self.limits.max_entries.saturating_mul(1536))
            .saturating_add(1 << 20);
        let c = &mut self.conns[i];
        if frame.channel != Channel::Tar {
            c.error(
                0,
                "order",
                "the host may only send data frames on channel 3 during an upload",
            );
            return;
        }
        match &mut c.upload {
            Upload::Idle => c.error(0, "order", "data frame without an upload in progress"),
            Upload::Draining => {
                if frame.payload.is_empty() {
                    c.upload = Upload::Idle;
                }
            }
            Upload::Receiving {
                id, spool, bytes, ..
            } => {
                let id = *id;
                if frame.payload.is_empty() {
                    let upload = std::mem::replace(&mut c.upload, Upload::Idle);
                    if let Upload::Receiving {
                        id,
                        dest,
                        owner,
                        spool,
                        ..
                    } = upload
                    {
                        self.finish_upload(i, id, &dest, owner, spool);
                    }
                    return;
                }
                *bytes += frame.payload.len() as u64;
                if *bytes > max_spool {
                    c.upload = Upload::Draining;
                    c.error(
                        id,
                        "refused",
                        format!("upload larger than {max_spool} bytes of tar stream"),
                    );
                    return;
                }
                if let Err(err) = spool.write_all(&frame.payload) {
                    c.upload = Upload::Draining;
                    c.error(id, "internal", format!("upload spool: {err}"));
                }
            }
        }
    }

    fn finish_upload(
        &mut self,
        i: usize,
        id: u64,
        dest: &Path,
        owner: Option<(u32, u32)>,
        mut spool: File,
    ) {
        let started = Instant::now();
        let result = spool
            .seek(SeekFrom::Start(0))
            .map_err(|e| UnpackError::Io("upload spool".into(), e))
            .and_then(|_| {
                unpack_tar(
                    std::io::BufReader::with_capacity(256 * 1024, spool),
                    dest,
                    &self.limits,
                    owner,
                )
            });
        let c = &mut self.conns[i];
        match result {
            Ok(report) => {
                tracing::info!(
                    "upload: {} ({} files, {} bytes)",
                    dest.display(),
                    report.files,
                    report.bytes
                );
                c.send(&Response::Ok {
                    id,
                    detail: json!({
                        "dest": dest,
                        "files": report.files,
                        "dirs": report.dirs,
                        "bytes": report.bytes,
                        "duration_ms": millis(started.elapsed()),
                    }),
                });
            }
            Err(err @ UnpackError::Io(..)) => c.error(id, "internal", err.to_string()),
            Err(err) => c.error(id, "refused", err.to_string()),
        }
    }

    fn on_control(&mut self, i: usize, frame: &Frame, ctx: &mut Supervisor) {
        let request: Request = match frame.json() {
            Ok(r) => r,
            Err(err) => {
                let id = salvage_id(&frame.payload);
                self.conns[i].error(id, "malformed", err.to_string());
                return;
            }
        };
        let id = request.id();
        if !self.conns[i].hello && !matches!(request, Request::Hello { .. }) {
            self.conns[i].error(id, "order", "the first request must be hello");
            return;
        }
        let running = self.current.is_some();
        let conn_id = self.conns[i].id;
        match request {
            Request::Hello { versions, .. } => {
                let c = &mut self.conns[i];
                if !versions.contains(&PROTOCOL_VERSION) {
                    c.error(
                        id,
                        "version",
                        format!(
                            "no common protocol version: host speaks {versions:?}, supervisor speaks [{PROTOCOL_VERSION}]"
                        ),
                    );
                    return;
                }
                c.hello = true;
                c.send(&Response::Hello {
                    id,
                    version: PROTOCOL_VERSION,
                    supervisor: format!("pitcrew-init {}", env!("CARGO_PKG_VERSION")),
                    capabilities: self.capabilities.clone(),
                });
            }
            Request::Upload { dest, owner, .. } => {
                let c = &mut self.conns[i];
                if !matches!(c.upload, Upload::Idle) {
                    c.error(
                        id,
                        "order",
                        "an upload is already in progress on this connection",
                    );
                    return;
                }
                if running {
                    c.upload = Upload::Draining;
                    c.error(id, "busy", "an iteration is running");
                    return;
                }
                let dest = match check_dest(&dest) {
                    Ok(dest) => dest,
                    Err(why) => {
                        c.upload = Upload::Draining;
                        c.error(id, "refused", why);
                        return;
                    }
                };
                let inside = |root: &Path| dest.starts_with(root) || root.starts_with(&dest);
                if inside(&self.records)
                    || self
                        .socket
                        .as_ref()
                        .and_then(|s| s.parent())
                        .is_some_and(inside)
                {
                    c.upload = Upload::Draining;
                    c.error(
                        id,
                        "refused",
                        format!(
                            "dest {} overlaps the supervisor's own directories",
                            dest.display()
                        ),
                    );
                    return;
                }
                let spool_path = self.records.join(format!(".upload-{conn_id}-{id}"));
                let spool = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&spool_path);
                match spool {
                    Ok(spool) => {
                        let _ = fs::remove_file(&spool_path);
                        c.upload = Upload::Receiving {
                            id,
                            dest,
                            owner: owner.map(|o| (o.uid, o.gid)),
                            spool,
                            bytes: 0,
                        };
                    }
                    Err(err) => {
                        c.upload = Upload::Draining;
                        c.error(id, "internal", format!("upload spool: {err}"));
                    }
                }
            }
            Request::SetManifest { manifest, .. } => {
                let c = &mut self.conns[i];
                if running {
                    c.error(id, "busy", "an iteration is running");
                    return;
                }
                if let Err(err) = manifest.validate() {
                    c.error(id, "malformed", err.to_string());
                    return;
                }
                c.send(&Response::Ok {
                    id,
                    detail: json!({"trees": manifest.trees.len(), "files": manifest.files.len()}),
                });
                self.manifest = Some(*manifest);
            }
            Request::Run { .. } => {
                let c = &mut self.conns[i];
                if running || self.pending_run.is_some() {
                    c.error(id, "busy", "an iteration is running");
                } else if self.manifest.is_none() {
                    c.error(id, "order", "run needs a manifest: send set_manifest first");
                } else if self.shutdown.is_some() {
                    c.error(id, "busy", "the supervisor is shutting down");
                } else {
                    self.pending_run = Some((conn_id, id));
                }
            }
            Request::Signal { signal, .. } => {
                let signo = signal_number(signal);
                if running {
                    self.actions.push(ObserverAction::Signal(signo));
                }
                self.conns[i].send(&Response::Ok {
                    id,
                    detail: json!({"delivered": running, "signal": exit_code::signal_name(signo)}),
                });
            }
            Request::Cancel { .. } => {
                if running {
                    self.actions
                        .push(ObserverAction::Cancel("requested by the host".into()));
                }
                self.conns[i].send(&Response::Ok {
                    id,
                    detail: json!({"cancelled": running}),
                });
            }
            Request::Collect { iteration, .. } => self.collect(i, id, iteration),
            Request::Status { verify, .. } => {
                if verify && running {
                    self.conns[i].error(
                        id,
                        "busy",
                        "live verification is refused while an iteration runs",
                    );
                    return;
                }
                let status = self.status(ctx, verify);
                self.conns[i].send(&Response::Status { id, status });
            }
            Request::Shutdown { .. } => {
                if running {
                    self.actions
                        .push(ObserverAction::Cancel("supervisor shutdown".into()));
                }
                self.shutdown = Some((conn_id, id));
            }
        }
    }

    fn status(&self, ctx: &Supervisor, verify: bool) -> Value {
        let mut status = json!({
            "state": if self.current.is_some() { "running" } else { "idle" },
            "iteration": self.current.as_ref().map_or(self.last_iteration, |c| c.iteration),
            "history": self.history,
            "manifest_loaded": self.manifest.is_some(),
            "processes": processes(),
            "capabilities": self.capabilities,
            "confinement": self.last_confinement,
        });
        if verify {
            let report = match &self.manifest {
                Some(m) => {
                    let report = crate::verify::verify(m, ctx.baseline.path());
                    let failures: Vec<Value> = report
                        .failures()
                        .into_iter()
                        .map(|f| json!({"exit_code": f.exit_code, "reason": f.reason}))
                        .collect();
                    json!({"ok": failures.is_empty(), "failures": failures, "report": report})
                }
                None => json!({"ok": false, "failures": [{"reason": "no manifest loaded"}]}),
            };
            status["verify"] = report;
        }
        status
    }

    fn collect(&mut self, i: usize, id: u64, iteration: Option<u32>) {
        let n = iteration.unwrap_or(self.last_iteration);
        let c = &mut self.conns[i];
        if self.current.as_ref().is_some_and(|cur| cur.iteration == n) {
            c.error(id, "busy", format!("iteration {n} is still running"));
            return;
        }
        let dir = records::iteration_dir(&self.records, n);
        if n == 0 || !dir.join("result.json").is_file() {
            c.error(id, "not-found", format!("no record of iteration {n}"));
            return;
        }
        let mut out = TarFrames::new(c);
        let tarred = records::tar_dir(&dir, &mut out);
        let sent = tarred.and_then(|()| out.end());
        match sent {
            Ok(bytes) => c.send(&Response::Ok {
                id,
                detail: json!({"iteration": n, "bytes": bytes}),
            }),
            Err(err) => {
                // The stream may be cut mid-tar: the host can no longer trust the framing.
                tracing::warn!("collect: iteration {n}: {err}");
                c.dead = true;
            }
        }
    }

    /// Runs one iteration for connection `conn_id`, request `id`.
    fn run(&mut self, ctx: &mut Supervisor, conn_id: u64, id: u64) {
        let Some(mut manifest) = self.manifest.clone() else {
            return;
        };
        let n = self.last_iteration + 1;
        self.last_iteration = n;
        let dir = records::iteration_dir(&self.records, n);
        let started_at = now_secs();
        let started = Instant::now();
        let stdout = dir.join("output.jsonl");
        let stderr = dir.join("stderr.log");
        manifest.output.stdout = Some(stdout.display().to_string());
        manifest.output.stderr = Some(stderr.display().to_string());
        let events = records::create_private_dir(&dir)
            .and_then(|()| {
                OpenOptions::new()
                    .append(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(dir.join("events.jsonl"))
            })
            .map_err(|e| format!("record directory {}: {e}", dir.display()));
        self.current = Some(Current {
            conn: Some(conn_id),
            id,
            iteration: n,
            events: events.as_ref().ok().and_then(|f| f.try_clone().ok()),
            tails: vec![
                Tail::new(stdout, Channel::Stdout),
                Tail::new(stderr, Channel::Stderr),
            ],
            behind: false,
        });
        // The agent's directories are prepared in `after_reap`, once nothing of an earlier
        // agent runs any more.
        let record = match events.map(drop) {
            Ok(()) => run_iteration(ctx, &manifest, n, self),
            Err(reason) => {
                let mut record = IterationResult::new(n, ctx.info.clone());
                record.finish(exit_code::SUPERVISOR_FAILED, Some(reason));
                record
            }
        };
        self.pump_tails(STREAM_CAP);

        // After the final reap nothing but the supervisor runs: copy what the agent left, and
        // keep the whole record within what the host accepts (one refused entry or a record
        // over the host's limits would lose all of it).
        // Processes that survived the final reap could swap paths under the copy (it runs as
        // root): then nothing the agent left is copied.
        let mut budget = if record.reaped.remaining_after > 0 {
            records::CopyBudget::none()
        } else {
            records::CopyBudget::default()
        };
        let output = records::copy_tree(
            &Path::new(&manifest.workdir).join("output"),
            &dir.join("output"),
            "output",
            &|_| true,
            &mut budget,
        );
        let transcripts = manifest.dirs.sessions.as_ref().map(|s| {
            records::copy_tree(
                Path::new(s),
                &dir.join("transcripts"),
                "transcripts",
                &|p| p.extension().is_some_and(|e| e == "jsonl"),
                &mut budget,
            )
        });
        // What the capture read past its cap (or after the record file failed) and did not keep.
        let mut truncated = serde_json::Map::new();
        for stream in record.agent.iter().flat_map(|a| &a.output) {
            if stream.dropped > 0 {
                let name = if stream.stream == "stderr" {
                    "stderr.log"
                } else {
                    "output.jsonl"
                };
                truncated.insert(name.into(), stream.dropped.into());
            }
        }
        for (what, report) in [
            ("output", Some(&output)),
            ("transcripts", transcripts.as_ref()),
        ] {
            if let Some(report) = report.filter(|r| !r.skipped.is_empty()) {
                tracing::warn!("record: {what}: skipped {:?}", report.skipped);
            }
        }
        self.step(
            "record",
            "finished",
            json!({
                "output": output,
                "transcripts": transcripts,
                "truncated_bytes": truncated,
                "not_copied": (record.reaped.remaining_after > 0)
                    .then_some("processes survived the final reap"),
            }),
        );
        let line = record.to_json_line();
        if let Err(err) = records::write_atomically(&dir.join("result.json"), line.as_bytes()) {
            tracing::error!("record: {}: {err}", dir.display());
        }
        self.last_confinement = record.confinement.clone();
        self.history.push(HistoryEntry {
            iteration: n,
            exit_code: record.exit_code,
            meaning: record.meaning.clone(),
            reason: record.reason.clone(),
            started_at,
            duration_ms: millis(started.elapsed()),
        });
        let value = serde_json::to_value(&record).unwrap_or(Value::Null);
        if let Some(cur) = self.current.take() {
            if let Some(c) = cur.conn.and_then(|id| self.conn_mut(id)) {
                c.send(&Response::Result {
                    id,
                    iteration: n,
                    record: value,
                });
            }
        }
        tracing::info!(
            "iteration {n}: exit {} {}",
            record.exit_code,
            record.reason.as_deref().unwrap_or("")
        );
    }

    /// Streams up to `budget` bytes of new agent output per stream to the requester (and
    /// advances the tails even without one). While the agent runs the budget is
    /// [`TAIL_BUDGET`]; once it has ended, [`STREAM_CAP`] (everything, up to the cap). A stream
    /// that reaches the cap gets an `output`/`truncated` event.
    fn pump_tails(&mut self, budget: u64) {
        let Some(cur) = self.current.as_mut() else {
            return;
        };
        let mut conn = cur
            .conn
            .and_then(|id| self.conns.iter_mut().find(|c| c.id == id));
        let mut behind = false;
        let mut truncated = Vec::new();
        for tail in &mut cur.tails {
            let pumped = tail.pump(budget, |channel, chunk| {
                if let Some(c) = conn.as_mut() {
                    c.data(channel, chunk);
                }
            });
            match pumped {
                Pumped::CaughtUp => {}
                Pumped::Behind => behind = true,
                Pumped::Truncated => truncated.push((tail.channel, tail.sent)),
            }
        }
        cur.behind = behind;
        for (channel, bytes) in truncated {
            tracing::warn!("output: {channel:?} reached {bytes} bytes; no longer streamed");
            self.step(
                "output",
                "truncated",
                json!({"channel": channel, "bytes": bytes}),
            );
        }
    }
}

impl IterationObserver for Server {
    fn step(&mut self, step: &str, state: &str, detail: Value) {
        if step == "agent" && state == "finished" {
            self.pump_tails(STREAM_CAP);
        }
        let Some(cur) = self.current.as_mut() else {
            return;
        };
        let event = Response::Event {
            id: cur.id,
            iteration: cur.iteration,
            step: step.to_string(),
            state: state.to_string(),
            detail,
        };
        if let Some(file) = cur.events.as_mut() {
            let mut line = serde_json::to_vec(&event).unwrap_or_default();
            line.push(b'\n');
            if let Err(err) = file.write_all(&line) {
                tracing::warn!("record: events.jsonl: {err}");
            }
        }
        if let Some(id) = cur.conn {
            if let Some(c) = self.conns.iter_mut().find(|c| c.id == id) {
                c.send(&event);
            }
        }
    }

    fn poll_fds(&self) -> Vec<BorrowedFd<'_>> {
        self.fds()
    }

    fn on_ready(&mut self, ctx: &mut Supervisor) -> Vec<ObserverAction> {
        self.service(ctx);
        std::mem::take(&mut self.actions)
    }

    fn on_tick(&mut self) {
        self.pump_tails(TAIL_BUDGET);
    }

    fn after_reap(&mut self, manifest: &Manifest) -> Result<(), String> {
        self.step("agent-dirs", "started", json!({}));
        match ensure_agent_dirs(manifest) {
            Ok(replaced) => {
                for r in &replaced {
                    tracing::warn!(
                        "agent-dirs: {} was a {}, replaced by a directory",
                        r.path,
                        r.was
                    );
                }
                self.step("agent-dirs", "finished", json!({"replaced": replaced}));
                Ok(())
            }
            Err(err) => {
                let reason = format!("agent-dirs: {err}");
                self.step("agent-dirs", "finished", json!({"error": reason}));
                Err(reason)
            }
        }
    }

    fn max_wait(&self) -> Duration {
        if self.current.as_ref().is_some_and(|c| c.behind) {
            Duration::ZERO
        } else {
            ITERATION_WAIT
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_root_peers_are_allowed() {
        assert!(peer_allowed(0).is_ok());
        let err = peer_allowed(65534).unwrap_err();
        assert!(err.contains("65534"), "{err}");
    }

    #[test]
    fn socket_dir_must_be_private() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        prepare_socket_dir(&dir).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        prepare_socket_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let err = prepare_socket_dir(&dir).unwrap_err();
        assert!(err.contains(&dir.display().to_string()), "{err}");
    }

    /// Pumps `tail` once; the bytes it sent.
    fn pump(tail: &mut Tail, budget: u64) -> (Pumped, u64) {
        let mut sent = 0u64;
        let pumped = tail.pump(budget, |channel, chunk| {
            assert_eq!(channel, Channel::Stdout);
            assert!(chunk.len() <= TAIL_CHUNK);
            sent += chunk.len() as u64;
        });
        (pumped, sent)
    }

    #[test]
    fn a_tail_sends_at_most_its_budget_per_call() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("out");
        let file = File::create(&path).unwrap();
        // A sparse file far larger than anything pumped here costs nothing.
        file.set_len(1 << 40).unwrap();
        let mut tail = Tail::new(path, Channel::Stdout);
        assert_eq!(pump(&mut tail, TAIL_BUDGET), (Pumped::Behind, TAIL_BUDGET));
        assert_eq!(pump(&mut tail, 100), (Pumped::Behind, 100));
        assert_eq!(tail.sent, TAIL_BUDGET + 100);
    }

    #[test]
    fn a_tail_stops_at_its_cap_only_when_more_follows() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("out");
        let mut file = File::create(&path).unwrap();
        let mut tail = Tail::new(path, Channel::Stdout);
        tail.cap = 3 * TAIL_CHUNK as u64;
        // Nothing yet (the file may not even exist yet in real use).
        assert_eq!(pump(&mut tail, u64::MAX), (Pumped::CaughtUp, 0));
        // Exactly the cap: all of it is sent, nothing is truncated.
        file.write_all(&vec![b'x'; 3 * TAIL_CHUNK]).unwrap();
        assert_eq!(pump(&mut tail, u64::MAX), (Pumped::CaughtUp, tail.cap));
        assert_eq!(pump(&mut tail, u64::MAX), (Pumped::CaughtUp, 0));
        assert!(!tail.truncated);
        // One byte more: the stream is truncated, once, and stays quiet afterwards.
        file.write_all(b"y").unwrap();
        assert_eq!(pump(&mut tail, u64::MAX), (Pumped::Truncated, 0));
        assert!(tail.truncated);
        file.write_all(b"more").unwrap();
        assert_eq!(pump(&mut tail, u64::MAX), (Pumped::CaughtUp, 0));
        assert_eq!(tail.sent, tail.cap);
    }

    #[test]
    fn a_tail_under_its_cap_sends_everything() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("out");
        fs::write(&path, b"{\"hello\":1}\n").unwrap();
        let mut tail = Tail::new(path, Channel::Stdout);
        assert_eq!(pump(&mut tail, TAIL_BUDGET), (Pumped::CaughtUp, 12));
    }

    #[test]
    fn destinations_are_checked() {
        assert!(check_dest("/opt/plugins/a").is_ok());
        assert!(check_dest("relative").is_err());
        assert!(check_dest("/opt/../etc").is_err());
        assert!(check_dest("/").is_err());
    }
}
