//! The `local` engine: the supervisor in fresh PID and mount namespaces on this machine.
//!
//! `start` spawns `unshare [--net] --pid --fork --mount-proc --ipc --kill-child <pitcrew-init> serve
//! --private-ipc --socket <sandbox>/run/control.sock --records <sandbox>/records`, detached (its own session, output to
//! `<sandbox>/supervisor.log`), so it keeps running after pitcrew exits. The sandbox shares this
//! machine's filesystem: uploads land under `<sandbox>/root`. `connect` spawns `pitcrew-init
//! attach --socket …`. State lives in `<state dir>/sandboxes/<id>/`:
//!
//! ```text
//! engine.json       0600: engine, id, pid and its start time, paths, creation time
//! run/              0700: the control socket (root only)
//! records/          0700: the supervisor's iteration records
//! root/             0755: uploads: plugins/, skills/, adapters/, config/, workspace/, home/, tmp/
//! supervisor.log    0600: the supervisor's own output
//! stopped           0600: empty; present when `down` stopped it and kept its state
//! ```
//!
//! The agent's uid must reach `root/`, so `<state dir>`, `sandboxes/` and `<id>/` are searchable
//! by others, but `sandboxes/` and `<id>/` are `0711`: the agent can neither list them (the other
//! sandboxes' ids) nor read what is not its own. Only the operator reads the rest (`ps`,
//! `inspect`, `down`, `collect`); the supervisor writes its log through the descriptor it was
//! started with and opens nothing of it by name.
//!
//! When the harness's `network:` (or, without the key, the runtime's default: its model
//! endpoint, or nothing for `command`) is `none` or `allow`, `--net` gives the sandbox a
//! network namespace of its own with loopback only, and `--private-run` an empty `/run` (the
//! host's socket files there out of the agent's reach); with `open` it shares this machine's
//! network and its `/run`.
//!
//! As root, `unshare` creates the PID, mount and IPC namespaces (with `--private-ipc` the
//! supervisor renews its IPC namespace and a tmpfs on `/dev/shm` before every iteration)
//! and the agent runs as the manifest's
//! uid (default 65534) of this machine. As any other user it runs rootless ([`super::rootless`]):
//! `unshare` also creates a user namespace mapping uid 0 to the user and uids 1–65536 to the
//! user's subordinate ids, so the supervisor is root of its sandbox and the agent a uid of its
//! own; when that is impossible `start` names what is missing (a kernel feature, `newuidmap`, the
//! subordinate ids). Stopping a rootless sandbox removes its state inside the same mapping, since
//! the agent's files belong to a subordinate uid the user cannot delete directly.
//!
//! The sandbox's process is known by its pid *and* its start time ([`super::process`]): a pid
//! the kernel gave to another process after the sandbox died is never signalled, and `ps`
//! shows such a sandbox as `stale`.

use super::process::{self, Identity};
use super::rootless::{self, RootlessPlan};
use super::stored;
use super::{is_root, Connection, Engine, SandboxEntry, SandboxId, SandboxSpec, StopOutcome};
use anyhow::{bail, Context as _};
use pitcrew_core::clock::now_secs;
use pitcrew_core::harness::SandboxLayout;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The file in a sandbox's state directory that says `down` (or `prune`) stopped it and kept
/// its state: it did not die.
const STOPPED_FILE: &str = "stopped";

/// How long `start` waits for the control socket to appear.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// How long `stop` waits for the supervisor to exit after `shutdown`.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// What `engine.json` records about a local sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LocalRecord {
    /// Always `local`.
    pub engine: String,
    /// The sandbox id.
    pub id: String,
    /// Pid of the `unshare` process holding the namespaces.
    pub pid: u32,
    /// That process's start time (field 22 of `/proc/<pid>/stat`, clock ticks after boot): with
    /// the pid, what identifies it. Absent in state written by older versions: such a pid is
    /// never signalled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_start: Option<u64>,
    /// The `pitcrew-init` binary.
    pub supervisor: PathBuf,
    /// The control socket.
    pub socket: PathBuf,
    /// The records directory.
    pub records: PathBuf,
    /// The uploads root.
    pub root: PathBuf,
    /// Creation time, seconds since the Unix epoch.
    pub created: u64,
    /// The user namespace of a rootless sandbox (absent when started as root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootless: Option<RootlessPlan>,
}

/// The local engine.
pub struct LocalEngine {
    state: PathBuf,
    supervisor: Option<PathBuf>,
}

impl LocalEngine {
    /// A local engine keeping state under `state`; `supervisor` overrides where `pitcrew-init`
    /// is found.
    pub fn new(state: PathBuf, supervisor: Option<PathBuf>) -> LocalEngine {
        LocalEngine { state, supervisor }
    }

    /// Whether this host's state holds sandbox `id`.
    pub fn knows(&self, id: &SandboxId) -> bool {
        !id.0.is_empty() && !id.0.contains('/') && self.dir(id).join("engine.json").exists()
    }

    /// Where the sandboxes' state directories are.
    pub fn sandboxes_dir(&self) -> PathBuf {
        self.sandboxes()
    }

    fn sandboxes(&self) -> PathBuf {
        self.state.join("sandboxes")
    }

    fn dir(&self, id: &SandboxId) -> PathBuf {
        self.sandboxes().join(&id.0)
    }

    /// Reads a sandbox's `engine.json`.
    pub fn record(&self, id: &SandboxId) -> anyhow::Result<LocalRecord> {
        let path = self.dir(id).join("engine.json");
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
                "no local sandbox {id} in {} (see `pitcrew ps --state-dir {}`)",
                self.sandboxes().display(),
                self.state.display()
            ),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => bail!(
                "cannot read the state of sandbox {id} ({}): permission denied: a sandbox's \
                 state and control channel are for the user who started it (root, or the \
                 rootless user) alone",
                path.display()
            ),
            Err(e) => return Err(e).with_context(|| format!("{}: read", path.display())),
        };
        serde_json::from_slice(&bytes).with_context(|| format!("{}: not valid", path.display()))
    }

    fn supervisor_binary(&self) -> anyhow::Result<PathBuf> {
        find_supervisor(self.supervisor.as_deref())
    }

    /// Sends `shutdown` to the sandbox's supervisor over its control socket.
    fn shutdown(&self, id: &SandboxId) -> anyhow::Result<()> {
        let mut conn = self.connect(id)?;
        let res = conn.client().shutdown();
        if let Err(err) = res {
            return Err(conn.explain(err)).context(format!("stopping sandbox {id}"));
        }
        conn.close();
        Ok(())
    }

    /// Creates the sandbox's directories in `dir`, starts its supervisor and waits until it
    /// listens.
    fn launch(
        &self,
        id: &SandboxId,
        dir: &Path,
        supervisor: PathBuf,
        rootless: Option<RootlessPlan>,
        env: &[(OsString, OsString)],
        spec: &SandboxSpec,
    ) -> anyhow::Result<()> {
        // The supervisor walks the agent's directories and Landlock roots without following any
        // symlink: give it the real path when the state dir is reached through one.
        let dir = &fs::canonicalize(dir).with_context(|| format!("{}: resolve", dir.display()))?;
        let run = dir.join("run");
        mkdir(&run, 0o700)?;
        let records = dir.join("records");
        mkdir(&records, 0o700)?;
        let root = dir.join("root");
        mkdir(&root, 0o755)?;
        let socket = run.join("control.sock");
        let log_path = dir.join("supervisor.log");
        let log = private_file(&log_path)?;
        let mut cmd = Command::new("unshare");
        if let Some(plan) = &rootless {
            cmd.args(plan.unshare_args());
        }
        // Own PID, mount and IPC namespaces: System V IPC and (with `--private-ipc`) /dev/shm
        // are the sandbox's alone, and nothing the agent leaves there outlives an iteration.
        // Its own network namespace when the harness controls egress: loopback only (the
        // supervisor brings `lo` up), the agent's connections carried by this host.
        if spec.private_network {
            cmd.arg("--net");
        }
        cmd.args(["--pid", "--fork", "--mount-proc", "--ipc", "--kill-child"])
            .arg(&supervisor)
            .arg("serve")
            .arg("--private-ipc")
            .arg("--socket")
            .arg(&socket)
            .arg("--records")
            .arg(&records)
            .args(spec.serve_args())
            // With a network namespace of its own, the host's socket files under /run (D-Bus,
            // nscd, systemd-resolved, …) would still be a way out: hidden from the agent.
            .args(spec.private_network.then_some("--private-run"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("supervisor.log: dup")?)
            .stderr(log)
            .current_dir("/")
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)));
        // SAFETY: the closure runs in the forked child before exec and only calls setsid and
        // `cloexec_from_3`, which are async-signal-safe and allocate nothing (an error is an
        // errno, turned into an `io::Error` without allocating).
        unsafe {
            cmd.pre_exec(|| {
                rustix::process::setsid()?;
                // The detached sandbox outlives this command: it must not hold the caller's
                // other descriptors (a pipe a shell pipeline waits on would never end).
                process::cloexec_from_3();
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .context("cannot start the local sandbox: unshare (util-linux) not found")?;
        // Our unreaped child: its pid cannot be anyone else's while we read its start time.
        let pid_start = match process::start_time(child.id()) {
            Ok(t) => t,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e).context(format!(
                    "local sandbox {id}: the start time of its process {}",
                    child.id()
                ));
            }
        };
        let record = LocalRecord {
            engine: "local".into(),
            id: id.0.clone(),
            pid: child.id(),
            pid_start: Some(pid_start),
            supervisor,
            socket: socket.clone(),
            records,
            root,
            created: now_secs(),
            rootless: rootless.clone(),
        };
        let json = serde_json::to_vec_pretty(&record)?;
        let engine_json = dir.join("engine.json");
        std::io::Write::write_all(&mut private_file(&engine_json)?, &json)
            .with_context(|| format!("{}: write", engine_json.display()))?;
        let start = Instant::now();
        // Listening, not just bound: a connection must be accepted.
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                let hint = match &rootless {
                    Some(plan) => format!(
                        " (rootless: `unshare {}` needs util-linux >= 2.38 and working newuidmap/newgidmap)",
                        plan.unshare_args()
                            .iter()
                            .map(|a| a.to_string_lossy())
                            .collect::<Vec<_>>()
                            .join(" ")
                    ),
                    None => String::new(),
                };
                bail!(
                    "local sandbox {id}: the supervisor exited ({status}) before listening{hint}: {}",
                    log_tail(&log_path)
                );
            }
            if start.elapsed() > START_TIMEOUT {
                // `--kill-child`: the namespace's PID 1 goes with unshare.
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "local sandbox {id}: no control socket at {} after {}s: {}",
                    socket.display(),
                    START_TIMEOUT.as_secs(),
                    log_tail(&log_path)
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }
}

/// Finds `pitcrew-init`: `--supervisor`, else next to the running `pitcrew`, else on `PATH`;
/// each an executable file by the one lookup rule ([`pitcrew_core::harness::find_program`]:
/// only absolute `PATH` entries, a regular file with an execute bit).
pub fn find_supervisor(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    use pitcrew_core::harness::find_program;
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    if let Some(p) = flag {
        let program = p.to_string_lossy();
        // A bare name is a file in the current directory here, not a PATH lookup.
        let program = if program.contains('/') {
            program.into_owned()
        } else {
            format!("./{program}")
        };
        return find_program(&program, &cwd, None)
            .map_err(|why| anyhow::anyhow!("--supervisor {}: {why}", p.display()));
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("pitcrew-init")));
    if let Some(found) = beside.and_then(|p| find_program(&p.to_string_lossy(), &cwd, None).ok()) {
        return Ok(found);
    }
    let path = std::env::var_os("PATH");
    find_program("pitcrew-init", &cwd, path.as_deref()).map_err(|why| {
        anyhow::anyhow!(
            "pitcrew-init not found next to pitcrew or on PATH ({why}); build it (`cargo build \
             --workspace --bins`) or pass --supervisor PATH"
        )
    })
}

/// The rootless plan for this (non-root) user, or why there can be none.
pub fn rootless_plan() -> anyhow::Result<RootlessPlan> {
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    rootless::plan(&rootless::Host, uid, gid)
}

/// Removes a sandbox's state directory: the agent wrote parts of it (the workspace, its home,
/// tmp and config dirs), so it is removed at any depth in a bounded number of descriptors,
/// without following a link or leaving the directory (`pitcrew_core::bounded_tree`).
fn remove_state(dir: &Path) -> anyhow::Result<()> {
    pitcrew_core::bounded_tree::remove_path(dir)
        .with_context(|| format!("{}: remove", dir.display()))?;
    Ok(())
}

/// Removes `dir` as root of a user namespace with `plan`'s mapping: the agent's files belong to
/// a subordinate uid that the user may not delete directly.
fn remove_rootless(dir: &Path, plan: &RootlessPlan) -> anyhow::Result<()> {
    let out = Command::new("unshare")
        .args(plan.unshare_args())
        .args(["rm", "-rf", "--"])
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .context("cannot remove a rootless sandbox's state: unshare (util-linux) not found")?;
    if !out.status.success() || dir.exists() {
        bail!(
            "{}: could not remove inside the sandbox's user namespace ({}): {}",
            dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Creates the file `path` (it must not exist) readable and writable by its owner alone: the
/// sandbox's host-side state is not the agent's to read.
fn private_file(path: &Path) -> anyhow::Result<fs::File> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("{}: create", path.display()))
}

fn mkdir(path: &Path, mode: u32) -> anyhow::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .with_context(|| format!("{}: create directory", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .with_context(|| format!("{}: chmod {mode:o}", path.display()))
}

/// The agent (another uid) must traverse every directory above its workspace.
fn check_searchable(root: &Path) -> anyhow::Result<()> {
    for dir in root.ancestors() {
        let Ok(meta) = fs::metadata(dir) else {
            continue;
        };
        if meta.permissions().mode() & 0o001 == 0 {
            bail!(
                "{}: mode {:o} does not let the agent's uid reach {} (chmod o+x it, or choose another --state-dir)",
                dir.display(),
                meta.permissions().mode() & 0o7777,
                root.display()
            );
        }
    }
    Ok(())
}

fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.trim().lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

/// Names of pitcrew's own environment every local sandbox starts with: the agent binary is
/// looked up on `PATH` as the operator sees it, the locale and `TZ` keep output readable, and
/// `RUST_LOG` sets the supervisor's log level.
const KEPT_ENV: [&str; 18] = [
    "PATH",
    "TZ",
    "RUST_LOG",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_COLLATE",
    "LC_MESSAGES",
    "LC_MONETARY",
    "LC_NUMERIC",
    "LC_TIME",
    "LC_ADDRESS",
    "LC_IDENTIFICATION",
    "LC_MEASUREMENT",
    "LC_NAME",
    "LC_PAPER",
    "LC_TELEPHONE",
];

/// The environment a local sandbox's supervisor starts with, i.e. the sandbox's *baseline*
/// (what an image's environment is to a container): from `own` (pitcrew's environment) only
/// [`KEPT_ENV`] and the names passed with `--pass-env`. The operator's shell environment
/// (tokens, agent sockets, cloud credentials) must not become the agent's. A passed name must
/// be set, must not be a loader variable (the supervisor would strip it) and must not be one the
/// supervisor sets itself (its value would be replaced) or reserves (`PITCREW_*`, …).
fn baseline_env(
    own: impl Iterator<Item = (OsString, OsString)>,
    pass: &[String],
    placeholders: &[String],
) -> anyhow::Result<Vec<(OsString, OsString)>> {
    super::check_pass_env_names(pass, &KEPT_ENV)?;
    let own: Vec<(OsString, OsString)> = own.collect();
    for name in pass {
        if !own.iter().any(|(k, _)| k.as_os_str() == name.as_str()) {
            bail!("--pass-env {name}: not set in pitcrew's environment");
        }
    }
    let named = (!pass.is_empty()).then(|| {
        (
            OsString::from(pitcrew_core::environment::PASSED_AT_START),
            OsString::from(pass.join(",")),
        )
    });
    Ok(own
        .into_iter()
        .filter(|(k, _)| {
            let k = k.to_string_lossy();
            KEPT_ENV.contains(&k.as_ref()) || pass.iter().any(|p| *p == k)
        })
        // A model credential's value stays here; its placeholder goes.
        .map(
            |(k, v)| match placeholders.iter().find(|p| k.as_os_str() == p.as_str()) {
                Some(name) => (
                    k,
                    OsString::from(pitcrew_core::manifest::model::placeholder(name)),
                ),
                None => (k, v),
            },
        )
        .chain(named)
        .collect())
}

impl Engine for LocalEngine {
    fn name(&self) -> &'static str {
        "local"
    }

    fn start(&self, spec: &SandboxSpec) -> anyhow::Result<SandboxId> {
        if let Some(name) = &spec.existing {
            let id = SandboxId(name.clone());
            if !self.knows(&id) {
                bail!(
                    "no local sandbox {id} in {} (pitcrew ps lists the sandboxes)",
                    self.sandboxes().display()
                );
            }
            if let Some(n) = spec.pass_env.first() {
                bail!("--pass-env {n}: sandbox {id} exists already; its environment was set when it was started");
            }
            self.connect(&id)?.close();
            return Ok(id);
        }
        let env = baseline_env(std::env::vars_os(), &spec.pass_env, &spec.placeholders)?;
        let rootless = if is_root() {
            None
        } else {
            Some(rootless_plan()?)
        };
        let supervisor = self.supervisor_binary()?;
        let id = SandboxId(super::random_id()?);
        let dir = self.dir(&id);
        // The agent's uid must reach <sandboxes>/<id>/root: refuse before creating anything
        // (directories that do not exist yet are created searchable by others, 0711: the agent
        // may pass through them, not list them).
        check_searchable(&self.sandboxes())?;
        if !self.state.exists() {
            mkdir(&self.state, 0o711)?;
        }
        mkdir(&self.sandboxes(), 0o711)?;
        if dir.exists() {
            bail!("{}: already exists", dir.display());
        }
        mkdir(&dir, 0o711)?;
        // A sandbox that does not come up leaves nothing behind: no directory, no process.
        match self.launch(&id, &dir, supervisor, rootless, &env, spec) {
            Ok(()) => Ok(id),
            Err(err) => {
                if let Err(e) = remove_state(&dir) {
                    tracing::warn!("remove after a failed start: {e:#}");
                }
                Err(err)
            }
        }
    }

    fn connect(&self, id: &SandboxId) -> anyhow::Result<Connection> {
        let rec = self.record(id)?;
        match fs::symlink_metadata(&rec.socket) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => bail!(
                "cannot reach the control socket of sandbox {id} ({}): permission denied: its control channel is root-only",
                rec.socket.display()
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
                "sandbox {id} is not running: no control socket at {} (see {})",
                rec.socket.display(),
                self.dir(id).join("supervisor.log").display()
            ),
            Err(e) => {
                return Err(e).with_context(|| format!("{}: stat", rec.socket.display()))
            }
        }
        let supervisor = match &self.supervisor {
            Some(p) => p.clone(),
            None if rec.supervisor.is_file() => rec.supervisor.clone(),
            None => self.supervisor_binary()?,
        };
        let argv: Vec<OsString> = vec![
            supervisor.into_os_string(),
            "attach".into(),
            "--socket".into(),
            rec.socket.into_os_string(),
        ];
        Connection::spawn(&argv, &format!("sandbox {id} (pitcrew-init attach)"))
    }

    fn owns(&self, id: &SandboxId) -> anyhow::Result<bool> {
        Ok(self.knows(id))
    }

    fn stop(&self, id: &SandboxId, keep_state: bool) -> anyhow::Result<StopOutcome> {
        let rec = self.record(id)?;
        let mut outcome = StopOutcome::default();
        match process::identify(rec.pid, rec.pid_start) {
            Identity::Running(proc_) => {
                // A supervisor that just died (killed) leaves its socket behind, refusing
                // connections, while the sandbox process is still on its way out: then the wait
                // below (and the kill after it) is what stops it.
                if rec.socket.exists() {
                    if let Err(err) = self.shutdown(id) {
                        tracing::info!("sandbox {id}: shutdown request: {err:#}");
                    }
                }
                if !proc_.wait_exit(STOP_TIMEOUT) {
                    // `--kill-child`: the namespace's PID 1 dies with unshare, and everything in
                    // the namespace with it.
                    tracing::warn!(
                        "sandbox {id}: no exit {}s after shutdown; killing pid {}",
                        STOP_TIMEOUT.as_secs(),
                        rec.pid
                    );
                    proc_
                        .kill()
                        .with_context(|| format!("sandbox {id}: kill pid {}", rec.pid))?;
                    proc_.wait_exit(Duration::from_secs(1));
                }
                if keep_state {
                    // What is kept is a stopped sandbox, not a dead one: `collect` and a later
                    // `down` say so and read nothing into its log.
                    if let Err(err) = private_file(&self.dir(id).join(STOPPED_FILE)) {
                        tracing::info!("sandbox {id}: {err:#}");
                    }
                }
            }
            Identity::Gone => {}
            other => {
                // The pid is not (or not provably) the sandbox's: it is never signalled. Only
                // the sandbox's own control socket, if it still answers, is asked to stop.
                if UnixStream::connect(&rec.socket).is_ok() {
                    self.shutdown(id)?;
                    let start = Instant::now();
                    while UnixStream::connect(&rec.socket).is_ok() {
                        if start.elapsed() > STOP_TIMEOUT {
                            bail!(
                                "sandbox {id}: its supervisor still answers {}s after shutdown, and {}; stop it by hand",
                                STOP_TIMEOUT.as_secs(),
                                other.warning(rec.pid).unwrap_or_default()
                            );
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
                outcome.warning = other.warning(rec.pid);
                outcome.left_alone = true;
            }
        }
        if !keep_state {
            let dir = self.dir(id);
            match &rec.rootless {
                Some(plan) => remove_rootless(&dir, plan)?,
                None => remove_state(&dir)?,
            }
        }
        Ok(outcome)
    }

    fn layout(&self, id: &SandboxId) -> anyhow::Result<SandboxLayout> {
        let rec = self.record(id)?;
        let root = rec
            .root
            .to_str()
            .with_context(|| format!("{}: not UTF-8", rec.root.display()))?
            .to_string();
        Ok(SandboxLayout { root })
    }

    fn describe(&self, id: &SandboxId) -> anyhow::Result<serde_json::Value> {
        let rec = self.record(id)?;
        let identity = process::identify(rec.pid, rec.pid_start);
        let mut v = serde_json::to_value(&rec)?;
        v["running"] = matches!(identity, Identity::Running(_)).into();
        v["state"] = identity.state().into();
        if let Some(why) = identity.warning(rec.pid) {
            v["state_detail"] = why.into();
        } else if matches!(identity, Identity::Gone) {
            // What kept it, and what removes it.
            v["state_detail"] = if self.dir(id).join(STOPPED_FILE).exists() {
                format!(
                    "stopped by down or prune with its state kept; pitcrew collect {id} fetches \
                     its records, then pitcrew down {id} removes it"
                )
            } else {
                format!(
                    "its supervisor exited unasked (its log: supervisor.log); pitcrew collect \
                     {id}, pitcrew down {id} (--force to delete its records)"
                )
            }
            .into();
        }
        v["state_dir"] = self.dir(id).to_string_lossy().into_owned().into();
        Ok(v)
    }

    fn log_source(&self, id: &SandboxId, _follow: bool) -> anyhow::Result<super::LogSource> {
        // Its engine.json names it one of ours (an unknown id fails here, naming it).
        self.record(id)?;
        Ok(super::LogSource::File(self.dir(id).join("supervisor.log")))
    }

    fn supervisor_gone(&self, id: &SandboxId) -> Option<super::Gone> {
        let rec = self.record(id).ok()?;
        let gone = match process::identify(rec.pid, rec.pid_start) {
            // A connection that just broke may come a moment before the exit.
            Identity::Running(p) => p.wait_exit(Duration::from_secs(1)),
            Identity::Gone | Identity::Reused { .. } => true,
            Identity::Unverified { .. } => false,
        };
        let log = self.dir(id).join("supervisor.log");
        if gone && self.dir(id).join(STOPPED_FILE).exists() {
            return Some(super::Gone {
                why: "by `pitcrew down` or `prune`, its state kept".into(),
                log_says: false,
                stopped: true,
            });
        }
        gone.then(|| match log_tail(&log) {
            tail if tail.is_empty() => super::Gone {
                why: format!("{} is empty", log.display()),
                log_says: false,
                stopped: false,
            },
            tail => super::Gone {
                why: format!("{} ends: {tail}", log.display()),
                log_says: true,
                stopped: false,
            },
        })
    }

    fn stored_uncollected(&self, id: &SandboxId) -> Option<Vec<u32>> {
        let rec = self.record(id).ok()?;
        stored::uncollected(&rec.records)
    }

    fn stored_record(
        &self,
        id: &SandboxId,
        iteration: Option<u32>,
    ) -> anyhow::Result<Option<(u32, Box<dyn std::io::Read + Send>)>> {
        let rec = self.record(id)?;
        stored::record_tar(&rec.records, iteration)
    }

    fn mark_stored_collected(&self, id: &SandboxId, iteration: u32) -> anyhow::Result<()> {
        let rec = self.record(id)?;
        stored::mark_collected(&rec.records, iteration)
            .with_context(|| format!("{}: note iteration {iteration}", rec.records.display()))
    }

    fn list(&self) -> anyhow::Result<Vec<SandboxEntry>> {
        let dir = self.sandboxes();
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("{}: read", dir.display())),
        };
        let mut out = Vec::new();
        for e in entries {
            let e = e.with_context(|| format!("{}: read", dir.display()))?;
            let id = SandboxId(e.file_name().to_string_lossy().into_owned());
            match self.describe(&id) {
                Ok(detail) => out.push(SandboxEntry {
                    id: id.0,
                    engine: "local".into(),
                    running: detail["running"].as_bool().unwrap_or(false),
                    state: detail["state"].as_str().unwrap_or("stopped").to_string(),
                    detail,
                }),
                Err(err) => tracing::warn!(
                    "{}",
                    crate::report::escape_controls(&format!("{}: {err:#}", e.path().display()))
                ),
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
