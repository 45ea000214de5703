//! Engines: how the host starts a sandbox, reaches its supervisor and stops it.
//!
//! An [`Engine`] knows four things about a sandbox: how to start one, how to spawn a process whose
//! stdin/stdout carry the control protocol to its supervisor ([`Connection`]), how to stop it,
//! and where uploads land inside it ([`SandboxLayout`]). Everything else (uploads, iterations,
//! collecting) is the protocol's and is the same for every engine: [`local`] (namespaces on this
//! machine), [`container`] (podman and docker containers pitcrew creates) and [`exec`] (a
//! sandbox someone else created, reached through a command template).

pub mod container;
pub mod exec;
pub mod kubernetes;
pub mod local;
pub mod process;
pub mod rootless;
mod stored;

use crate::client::{Client, ClientError, HelloReply};
use anyhow::{bail, Context as _};
use pitcrew_core::harness::SandboxLayout;
use pitcrew_core::protocol::status::RunState;
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A sandbox's name as its engine knows it (a local id such as `pc-1a2b3c4d`, or the container
/// name given to the exec engine).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxId(pub String);

impl std::fmt::Display for SandboxId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What to start.
#[derive(Debug, Clone, Default)]
pub struct SandboxSpec {
    /// An existing sandbox to drive instead of a new one (`run --sandbox`; the exec engine
    /// only attaches).
    pub existing: Option<String>,
    /// Variables of pitcrew's own environment to pass into a new sandbox's baseline
    /// (`--pass-env`); an exec sandbox's baseline is its container's environment.
    pub pass_env: Vec<String>,
    /// Of `pass_env`, the model credentials: the sandbox gets
    /// [`pitcrew_core::manifest::model::placeholder`] in place of their values.
    pub placeholders: Vec<String>,
    /// The agent's memory limit (the harness's `memory`); a container gets it plus room for
    /// the supervisor.
    pub memory_bytes: u64,
    /// The agent's process limit (the harness's `processes`); a container gets it plus room
    /// for the supervisor.
    pub processes: u64,
    /// The most one upload may hold (the harness's `upload_limits`): a new sandbox's
    /// supervisor is started with them ([`SandboxSpec::serve_args`]).
    pub upload_limits: pitcrew_core::protocol::UploadLimits,
    /// A new sandbox gets a network namespace of its own with loopback only where the engine
    /// makes one (the local engine; containers start with `--network=none` already): the
    /// harness says `network: none` or `allow`.
    pub private_network: bool,
}

impl SandboxSpec {
    /// The `pitcrew-init serve` options a new sandbox's supervisor needs beyond the engine's
    /// own: the upload limits when they are not its defaults (an image's default command stays
    /// as it is otherwise).
    pub fn serve_args(&self) -> Vec<String> {
        let limits = self.upload_limits;
        if limits == pitcrew_core::protocol::UploadLimits::default() {
            return Vec::new();
        }
        vec![
            "--upload-max-entries".into(),
            limits.max_entries.to_string(),
            "--upload-max-bytes".into(),
            limits.max_bytes.to_string(),
        ]
    }
}

/// One sandbox known to an engine (for `pitcrew ps`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct SandboxEntry {
    /// Its id.
    pub id: String,
    /// The engine.
    pub engine: String,
    /// Whether its supervisor is running.
    pub running: bool,
    /// `running`, `stopped`, `stale` (its pid is another process now) or `unverified` (a
    /// live pid that cannot be shown to be the sandbox's).
    pub state: String,
    /// Engine-specific details.
    pub detail: serde_json::Value,
}

/// What [`Engine::stop`] did, beyond stopping.
#[derive(Debug, Clone, Default)]
pub struct StopOutcome {
    /// What the operator should know about the stop (why a process was left alone, what was
    /// not removed).
    pub warning: Option<String>,
    /// Nothing was stopped: the recorded process no longer is, or cannot be shown to be, the
    /// sandbox's, so it was left alone.
    pub left_alone: bool,
    /// Its state was kept though the caller asked for it to go ([`stop_keeping_records`]: a
    /// record the host never collected, a supervisor that died); `warning` says why.
    pub state_kept: bool,
}

/// How the host starts, reaches and stops sandboxes.
pub trait Engine {
    /// The engine's name (`local`, `exec`).
    fn name(&self) -> &'static str;
    /// Starts a sandbox (or attaches to an existing one) and returns its id once its supervisor
    /// answers.
    fn start(&self, spec: &SandboxSpec) -> anyhow::Result<SandboxId>;
    /// Opens a protocol connection to the sandbox's supervisor (`hello` already exchanged).
    fn connect(&self, id: &SandboxId) -> anyhow::Result<Connection>;
    /// Whether pitcrew created the sandbox (and so may stop and remove it without `--force`).
    fn owns(&self, id: &SandboxId) -> anyhow::Result<bool>;
    /// Stops the sandbox; `keep_state` keeps host-side state (records) for later reading.
    fn stop(&self, id: &SandboxId, keep_state: bool) -> anyhow::Result<StopOutcome>;
    /// Where uploads go inside the sandbox.
    fn layout(&self, id: &SandboxId) -> anyhow::Result<SandboxLayout>;
    /// A description of the sandbox for people and `--json` (engine, paths, pids).
    fn describe(&self, id: &SandboxId) -> anyhow::Result<serde_json::Value>;
    /// Sandboxes this engine knows about on this host (empty when it keeps no state).
    fn list(&self) -> anyhow::Result<Vec<SandboxEntry>>;
    /// Why the sandbox's supervisor is known to be gone (it died, or was killed), with what its
    /// log said last; `None` when it runs or the engine cannot tell.
    fn supervisor_gone(&self, _id: &SandboxId) -> Option<Gone> {
        None
    }
    /// The finished iterations whose records the host never collected, read from the sandbox's
    /// storage (its supervisor need not run); `None` when the engine cannot read it.
    fn stored_uncollected(&self, _id: &SandboxId) -> Option<Vec<u32>> {
        None
    }
    /// Notes in the sandbox's storage that the host now holds the record of `iteration`, read
    /// from there while its supervisor was gone (as the supervisor notes a record collected
    /// from it), so that a later stop may delete it. Engines that cannot write the storage do
    /// nothing.
    fn mark_stored_collected(&self, _id: &SandboxId, _iteration: u32) -> anyhow::Result<()> {
        Ok(())
    }
    /// The record of `iteration` (default: the latest) read from the sandbox's storage when its
    /// supervisor cannot send it: its number and a tar stream like `collect`'s; `None` when the
    /// engine cannot read the storage.
    fn stored_record(
        &self,
        _id: &SandboxId,
        _iteration: Option<u32>,
    ) -> anyhow::Result<Option<(u32, Box<dyn Read + Send>)>> {
        Ok(None)
    }
    /// Where the sandbox's supervisor log is read from (`follow`: a command that keeps
    /// printing it); an error when the engine keeps none on this host.
    fn log_source(&self, id: &SandboxId, _follow: bool) -> anyhow::Result<LogSource> {
        bail!(
            "sandbox {id}: the {} engine keeps no log of its supervisor here (it is wherever the \
             sandbox's owner puts PID 1's output)",
            self.name()
        )
    }
    /// `err`, a connection lost mid-request, said better when the supervisor is known to be
    /// gone.
    fn explain_lost(&self, id: &SandboxId, err: anyhow::Error) -> anyhow::Error {
        match self.supervisor_gone(id) {
            Some(gone) if gone.stopped => {
                err.context(format!("sandbox {id} was stopped: {}", gone.why))
            }
            Some(gone) => err.context(format!("the supervisor of sandbox {id} died: {}", gone.why)),
            None => err,
        }
    }
}

/// Where `pitcrew logs` reads a sandbox's supervisor log from ([`Engine::log_source`]).
#[derive(Debug)]
pub enum LogSource {
    /// A file on this host (the local engine's `supervisor.log`), followed by reading what is
    /// added while the sandbox runs.
    File(std::path::PathBuf),
    /// A command that prints the log on its stdout and stderr (`podman logs`, `kubectl logs`),
    /// asked to follow it when `--follow` is given: it ends when the sandbox stops.
    Command(std::process::Command),
}

/// A sandbox whose supervisor is gone ([`Engine::supervisor_gone`]).
#[derive(Debug, Clone)]
pub struct Gone {
    /// What is known: where its log is and how it ends.
    pub why: String,
    /// Its log says something (evidence a stop must not delete without `--force`).
    pub log_says: bool,
    /// It did not die: it was stopped (`pitcrew down` or `prune` keeping its state, or its
    /// container's PID 1 shut down cleanly), so its log is no evidence of a failure.
    pub stopped: bool,
}

impl Gone {
    /// `it was stopped (…)` or `its supervisor died (…)`, for a message about the sandbox.
    pub fn said(&self) -> String {
        if self.stopped {
            format!("it was stopped ({})", self.why)
        } else {
            format!("its supervisor died ({})", self.why)
        }
    }
}

/// One `status` of sandbox `id`, over a connection of its own.
pub fn status_of(
    engine: &dyn Engine,
    id: &SandboxId,
) -> anyhow::Result<pitcrew_core::protocol::StatusDoc> {
    let mut conn = engine.connect(id)?;
    let status = conn.client().status(false).map_err(|e| conn.explain(e));
    conn.close();
    status
}

/// Stops sandbox `id` without deleting what nobody else holds: unless `force`, a sandbox with
/// records the host never collected, or whose supervisor died (its log says why; one that was
/// stopped did not die), keeps its
/// state (records, log; a container is stopped, not removed), and the outcome's warning says
/// so and how to fetch or delete them.
pub fn stop_keeping_records(
    engine: &dyn Engine,
    id: &SandboxId,
    keep_state: bool,
    force: bool,
) -> anyhow::Result<StopOutcome> {
    let mut why_kept = None;
    if !keep_state && !force {
        let asked = status_of(engine, id);
        let not_collected = |count: usize, list: &[u32]| {
            format!(
                "{count} record(s) not collected (iteration {})",
                list.iter()
                    .take(10)
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let kept_because = |count: usize, list: &[u32]| {
            format!(
                "{}: its state is kept; `pitcrew collect {id} --iteration N` fetches one \
                 (once all are, `pitcrew down {id}` removes the sandbox), `pitcrew down {id} --force` \
                 deletes them",
                not_collected(count, list)
            )
        };
        why_kept = match &asked {
            // An iteration still running ends with the stop and leaves a record nobody holds.
            Ok(status) if status.state == RunState::Running => Some(format!(
                "iteration {} was running: its record is kept; `pitcrew collect {id}` fetches \
                 it (then `pitcrew down {id}` removes the sandbox), `pitcrew down {id} --force` \
                 deletes it",
                status.iteration
            )),
            Ok(status) => {
                let uncollected = status.uncollected.clone().unwrap_or_default();
                let count = usize::try_from(uncollected.count).unwrap_or(usize::MAX);
                (count > 0).then(|| kept_because(count, &uncollected.iterations))
            }
            Err(err) => {
                tracing::info!("sandbox {id}: status before stopping: {err:#}");
                let stored = engine.stored_uncollected(id);
                match (engine.supervisor_gone(id), stored) {
                    // Its log says why it died: kept with the records, whatever was collected
                    // (naming those never collected).
                    (Some(gone), stored) if gone.log_says && !gone.stopped => {
                        let records = match stored.as_deref() {
                            None | Some([]) => String::new(),
                            Some(list) => format!("{}; ", not_collected(list.len(), list)),
                        };
                        Some(format!(
                            "{records}its supervisor died ({}): its state is kept for `pitcrew \
                             collect` and the log; `pitcrew down {id} --force` deletes it",
                            gone.why
                        ))
                    }
                    (_, Some(list)) if list.is_empty() => None,
                    (_, Some(list)) => Some(kept_because(list.len(), &list)),
                    (_, None) => Some(format!(
                        "its supervisor does not answer and its records cannot be read: its \
                         state is kept; `pitcrew down {id} --force` deletes it"
                    )),
                }
            }
        };
    }
    let mut outcome = engine.stop(id, keep_state || why_kept.is_some())?;
    outcome.state_kept = why_kept.is_some();
    if let Some(why) = why_kept {
        outcome.warning = Some(match outcome.warning.take() {
            Some(w) => format!("{w}; {why}"),
            None => why,
        });
    }
    Ok(outcome)
}

/// A protocol session with a sandbox's supervisor, carried by a spawned process's stdio
/// (`pitcrew-init attach`, `podman exec -i … pitcrew-init attach`).
pub struct Connection {
    child: Child,
    client: Client<ChildStdout, ChildStdin>,
    hello: HelloReply,
    stderr: Arc<Mutex<Vec<u8>>>,
    what: String,
}

impl Connection {
    /// Whether the supervisor serves `request` (its `hello` lists it).
    pub fn supports(&self, request: &str) -> bool {
        self.hello
            .capabilities
            .requests
            .iter()
            .any(|r| r == request)
    }

    /// Spawns `argv` and says `hello` over its stdio. The process runs in its own process group
    /// so a Ctrl-C on the terminal reaches pitcrew (which then sends `cancel`), not the
    /// transport. `what` names the transport in errors.
    pub fn spawn(argv: &[OsString], what: &str) -> anyhow::Result<Connection> {
        let (program, args) = argv
            .split_first()
            .context("the transport command is empty")?;
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .with_context(|| format!("{what}: cannot start {}", program.to_string_lossy()))?;
        let stderr = Arc::new(Mutex::new(Vec::new()));
        if let Some(mut pipe) = child.stderr.take() {
            let sink = Arc::clone(&stderr);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let mut s = sink
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    // Keep the last 16 KiB: enough for any error message.
                    s.extend_from_slice(&buf[..n]);
                    let excess = s.len().saturating_sub(16 * 1024);
                    s.drain(..excess);
                }
            });
        }
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            bail!("{what}: the transport's stdio was not piped");
        };
        let mut client = Client::new(stdout, stdin);
        match client.hello() {
            Ok(hello) => Ok(Connection {
                child,
                client,
                hello,
                stderr,
                what: what.to_string(),
            }),
            Err(err) => {
                drop(client);
                let status = wait_timeout(&mut child, Duration::from_secs(2));
                // Give the stderr reader a moment to see the last bytes.
                std::thread::sleep(Duration::from_millis(20));
                let said = tail(&stderr);
                let status = match status {
                    Some(s) => format!(" ({s})"),
                    None => String::new(),
                };
                if said.is_empty() {
                    Err(anyhow::Error::new(err).context(format!("{what}{status}")))
                } else {
                    bail!("{what}{status}: {said}")
                }
            }
        }
    }

    /// The protocol client.
    pub fn client(&mut self) -> &mut Client<ChildStdout, ChildStdin> {
        &mut self.client
    }

    /// What the supervisor said in reply to `hello`.
    pub fn hello(&self) -> &HelloReply {
        &self.hello
    }

    /// Adds what the transport printed on stderr to an error from the client.
    pub fn explain(&self, err: ClientError) -> anyhow::Error {
        let said = tail(&self.stderr);
        let err = anyhow::Error::new(err);
        if said.is_empty() {
            err
        } else {
            err.context(format!("{} said: {said}", self.what))
        }
    }

    /// Closes the session: ends the transport's input and waits (briefly) for it to exit,
    /// killing it if it does not. (Dropping a connection only closes its input.)
    pub fn close(self) {
        let Connection {
            mut child,
            client,
            what,
            ..
        } = self;
        drop(client);
        if wait_timeout(&mut child, Duration::from_secs(2)).is_none() {
            tracing::warn!("{what}: still running 2 s after its input was closed; killed");
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn tail(buf: &Mutex<Vec<u8>>) -> String {
    let b = buf
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let s = String::from_utf8_lossy(&b);
    s.trim()
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Waits for `child` up to `timeout`; `None` if it is still running.
pub fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if start.elapsed() >= timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Options that choose and configure the engine (shared by `run` and the operator commands).
#[derive(Debug, Clone, clap::Args)]
pub struct EngineArgs {
    /// Which engine runs the sandbox [default: `local` for `run`; the operator commands find a
    /// sandbox by its id in the local state, then among podman's and docker's containers
    /// labelled `pitcrew.sandbox`] [env: PITCREW_ENGINE].
    #[arg(long, value_enum, help_heading = "Engine")]
    pub engine: Option<EngineKind>,
    /// Host-side state of local sandboxes [env: PITCREW_STATE_DIR] [default: /var/lib/pitcrew
    /// for root, else $XDG_STATE_HOME/pitcrew or ~/.local/state/pitcrew].
    #[arg(long, value_name = "DIR", help_heading = "Local engine")]
    pub state_dir: Option<PathBuf>,
    /// The `pitcrew-init` binary for the local engine [default: next to `pitcrew`, else on PATH].
    #[arg(long, value_name = "PATH", help_heading = "Local engine")]
    pub supervisor: Option<PathBuf>,
    /// The image new sandboxes are created from (its entrypoint is
    /// `pitcrew-init`; `scripts/build-image pi|claude` builds one and prints its reference,
    /// e.g. localhost/pitcrew-pi:0.1.0-init4afd0f5d-pi0.73.1-ctxffce1ae6) [env: PITCREW_IMAGE,
    /// used by those engines only].
    #[arg(
        long,
        value_name = "IMAGE",
        help_heading = "Podman, docker and kubernetes engines"
    )]
    pub image: Option<String>,
    /// The network a new sandbox joins [default: none]. What the
    /// agent reaches is the harness's `network:` (by default its model endpoint), carried by
    /// pitcrew through a sandbox without a network; a sandbox joining another network refuses
    /// `network: none` and `allow` unless the harness says `network: open`.
    #[arg(
        long,
        value_name = "NETWORK",
        help_heading = "Podman and docker engines"
    )]
    pub network: Option<String>,
    /// The command that reaches the sandbox's `pitcrew-init attach`, split on
    /// whitespace with `{sandbox}` substituted (no shell) [default: podman exec -i {sandbox}
    /// pitcrew-init attach].
    #[arg(long, value_name = "TEMPLATE", help_heading = "Exec engine")]
    pub exec_template: Option<String>,
    /// Where uploads live inside the sandbox [default: /pitcrew].
    #[arg(long, value_name = "DIR", help_heading = "Exec engine")]
    pub sandbox_root: Option<String>,
    /// The kubeconfig context [default: its current context].
    #[arg(long, value_name = "NAME", help_heading = "Kubernetes engine")]
    pub context: Option<String>,
    /// The namespace [default: the context's].
    #[arg(long, value_name = "NAME", help_heading = "Kubernetes engine")]
    pub namespace: Option<String>,
    /// The Pod template (YAML or JSON) pitcrew fills in [default: the
    /// built-in `images/kubernetes/pod.yaml`].
    #[arg(long, value_name = "FILE", help_heading = "Kubernetes engine")]
    pub pod_template: Option<PathBuf>,
    /// A node path the Pod template may mount as a `hostPath` volume
    /// (repeatable; a `hostPath` volume whose path is none of these is refused) [default: none].
    #[arg(long, value_name = "PATH", help_heading = "Kubernetes engine")]
    pub allow_host_path: Vec<String>,
}

/// The engines this build has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineKind {
    /// The supervisor in fresh PID and mount namespaces on this machine (rootless through a
    /// user namespace and subordinate ids when not run as root).
    Local,
    /// A podman container pitcrew creates from `--image` (and removes unless `--keep`).
    Podman,
    /// A docker container pitcrew creates from `--image` (and removes unless `--keep`).
    Docker,
    /// An existing sandbox reached through an exec-style command template.
    Exec,
    /// A Pod per sandbox in the cluster `kubectl`'s kubeconfig names (removed unless `--keep`).
    Kubernetes,
}

impl EngineArgs {
    /// The engine these options choose (`local` when none is named).
    pub fn engine(&self) -> anyhow::Result<Box<dyn Engine>> {
        self.engine_of(self.named()?.unwrap_or(EngineKind::Local))
    }

    /// The engine `--engine` names, else `PITCREW_ENGINE` (empty: unset); a variable that names
    /// no engine is an error naming it.
    pub fn named(&self) -> anyhow::Result<Option<EngineKind>> {
        if self.engine.is_some() {
            return Ok(self.engine);
        }
        match std::env::var("PITCREW_ENGINE") {
            Ok(v) if !v.is_empty() => <EngineKind as clap::ValueEnum>::from_str(&v, true)
                .map(Some)
                .map_err(|_| {
                    anyhow::anyhow!(
                        "PITCREW_ENGINE={v:?} names no engine (local, podman, docker, exec, \
                             kubernetes)"
                    )
                }),
            _ => Ok(None),
        }
    }

    /// The engine of kind `kind`, configured by these options. An option that does nothing for
    /// it is an error, never ignored (the local engine's with another engine named).
    fn engine_of(&self, kind: EngineKind) -> anyhow::Result<Box<dyn Engine>> {
        if kind != EngineKind::Exec {
            for (flag, given) in [
                ("--exec-template", self.exec_template.is_some()),
                ("--sandbox-root", self.sandbox_root.is_some()),
            ] {
                if given {
                    bail!("{flag} is for the exec engine");
                }
            }
        }
        if self
            .named()?
            .is_some_and(|named| named != EngineKind::Local)
        {
            let by = if self.engine.is_none() {
                " (PITCREW_ENGINE names another)"
            } else {
                ""
            };
            for (flag, given) in [
                ("--state-dir", self.state_dir.is_some()),
                ("--supervisor", self.supervisor.is_some()),
            ] {
                if given {
                    bail!("{flag} is for the local engine{by}");
                }
            }
        }
        if !matches!(
            kind,
            EngineKind::Podman | EngineKind::Docker | EngineKind::Kubernetes
        ) && self.image.is_some()
        {
            bail!("--image is for the podman, docker and kubernetes engines");
        }
        if kind != EngineKind::Podman && kind != EngineKind::Docker && self.network.is_some() {
            bail!("--network is for the podman and docker engines (a Pod's network is the cluster's; select a network policy with the Pod template's labels)");
        }
        if kind != EngineKind::Kubernetes {
            for (flag, given) in [
                ("--context", self.context.is_some()),
                ("--namespace", self.namespace.is_some()),
                ("--pod-template", self.pod_template.is_some()),
                ("--allow-host-path", !self.allow_host_path.is_empty()),
            ] {
                if given {
                    bail!("{flag} is for the kubernetes engine");
                }
            }
        }
        // `PITCREW_IMAGE` is a default for the engines that take an image, never an error for
        // the others (unlike `--image` given on the command line).
        let image = self.image.clone().or_else(|| {
            std::env::var("PITCREW_IMAGE")
                .ok()
                .filter(|v| !v.is_empty())
        });
        let container = |cli| {
            Box::new(container::ContainerEngine::new(
                cli,
                image.clone(),
                self.network.clone(),
            ))
        };
        Ok(match kind {
            EngineKind::Local => Box::new(local::LocalEngine::new(
                state_dir(self.state_dir.as_deref())?,
                self.supervisor.clone(),
            )),
            EngineKind::Podman => container(container::Cli::Podman),
            EngineKind::Docker => container(container::Cli::Docker),
            EngineKind::Exec => Box::new(exec::ExecEngine::new(
                self.exec_template
                    .as_deref()
                    .unwrap_or("podman exec -i {sandbox} pitcrew-init attach"),
                self.sandbox_root.as_deref().unwrap_or("/pitcrew"),
            )?),
            EngineKind::Kubernetes => Box::new(kubernetes::KubernetesEngine::new(
                self.context.clone(),
                self.namespace.clone(),
                image.clone(),
                self.pod_template.clone(),
                self.allow_host_path
                    .iter()
                    .map(|p| kubernetes::pod::normal_path(p))
                    .collect::<Result<_, _>>()
                    .map_err(|e| anyhow::anyhow!("--allow-host-path {e}"))?,
            )),
        })
    }

    /// The engine holding sandbox `id`: the one `--engine` names, else the first that knows
    /// it: the local state, then podman's and docker's containers labelled with the id.
    pub fn engine_for(&self, id: &SandboxId) -> anyhow::Result<Box<dyn Engine>> {
        if let Some(kind) = self.named()? {
            return self.engine_of(kind);
        }
        let local = local::LocalEngine::new(
            state_dir(self.state_dir.as_deref())?,
            self.supervisor.clone(),
        );
        if local.knows(id) {
            return self.engine_of(EngineKind::Local);
        }
        // Pods: their ids say so (a cluster is never asked about other ids).
        if id.0.starts_with(kubernetes::ID_PREFIX) && on_path("kubectl") {
            return self.engine_of(EngineKind::Kubernetes);
        }
        let mut looked = vec![format!("{}", local.sandboxes_dir().display())];
        for (cli, kind) in [
            (container::Cli::Podman, EngineKind::Podman),
            (container::Cli::Docker, EngineKind::Docker),
        ] {
            if !on_path(cli.program()) {
                continue;
            }
            let engine = container::ContainerEngine::new(cli, None, None);
            match engine.inspect(&id.0) {
                Ok(Some(c)) if c.created_by_pitcrew(id) => return self.engine_of(kind),
                Ok(_) => looked.push(format!(
                    "{} (no container labelled {}={id})",
                    cli.program(),
                    container::LABEL_SANDBOX
                )),
                Err(err) => looked.push(format!("{} ({err:#})", cli.program())),
            }
        }
        bail!(
            "no sandbox {id}: looked in {}; a sandbox pitcrew did not create needs --engine",
            looked.join(", ")
        )
    }

    /// The engines `ps` lists: the one `--engine` names, else local and every container
    /// engine whose CLI is installed (a cluster only with `--engine kubernetes`).
    pub fn engines_to_list(&self) -> anyhow::Result<Vec<Box<dyn Engine>>> {
        if let Some(kind) = self.named()? {
            return Ok(vec![self.engine_of(kind)?]);
        }
        let mut engines = vec![self.engine_of(EngineKind::Local)?];
        for (cli, kind) in [
            (container::Cli::Podman, EngineKind::Podman),
            (container::Cli::Docker, EngineKind::Docker),
        ] {
            if on_path(cli.program()) {
                engines.push(self.engine_of(kind)?);
            }
        }
        Ok(engines)
    }
}

/// Whether `program` is an executable file in an absolute directory of `PATH` (the rule the
/// supervisor resolves its agent by).
fn on_path(program: &str) -> bool {
    let path = std::env::var_os("PATH");
    pitcrew_core::harness::find_program(program, std::path::Path::new("/"), path.as_deref()).is_ok()
}

/// Checks the names of `--pass-env`: each a variable name, none a loader variable, and none a
/// name the supervisor sets itself or reserves, except the `kept` ones the engine passes anyway.
pub fn check_pass_env_names(pass: &[String], kept: &[&str]) -> anyhow::Result<()> {
    use pitcrew_core::{env_policy, environment};
    let pinned = environment::pinned_names();
    for name in pass {
        let valid = name
            .bytes()
            .enumerate()
            .all(|(i, b)| b == b'_' || b.is_ascii_alphabetic() || (i > 0 && b.is_ascii_digit()));
        if name.is_empty() || !valid {
            bail!("--pass-env {name:?}: not an environment variable name");
        }
        if let Some(rule) = env_policy::loader_denial(name) {
            bail!(
                "--pass-env {name}: refused by the loader rule {rule}; it never reaches an agent"
            );
        }
        if kept.contains(&name.as_str()) {
            continue;
        }
        if pinned.contains(&name.as_str()) {
            bail!("--pass-env {name}: the supervisor sets {name} itself; a passed value would be replaced");
        }
        if let Some(rule) = env_policy::sandbox_env_reserved(name) {
            bail!("--pass-env {name}: reserved, {rule}");
        }
    }
    Ok(())
}

/// A fresh sandbox id: `pc-` and 8 random hex digits.
pub fn random_id() -> anyhow::Result<String> {
    let mut b = [0u8; 4];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("/dev/urandom: read")?;
    Ok(format!(
        "pc-{:02x}{:02x}{:02x}{:02x}",
        b[0], b[1], b[2], b[3]
    ))
}

/// The state directory: `--state-dir`, else `PITCREW_STATE_DIR`, else `/var/lib/pitcrew` for
/// root, else `$XDG_STATE_HOME/pitcrew` or `~/.local/state/pitcrew`.
pub fn state_dir(flag: Option<&std::path::Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = flag {
        // Absent is fine (made by the first sandbox); something else in its place is not.
        if p.exists() && !p.is_dir() {
            bail!("--state-dir {}: not a directory", p.display());
        }
        return Ok(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("PITCREW_STATE_DIR").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    if is_root() {
        return Ok(PathBuf::from("/var/lib/pitcrew"));
    }
    if let Some(p) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(p).join("pitcrew"));
    }
    let home = std::env::var_os("HOME").filter(|v| !v.is_empty()).context(
        "no state directory: set --state-dir, PITCREW_STATE_DIR, XDG_STATE_HOME or HOME",
    )?;
    Ok(PathBuf::from(home).join(".local/state/pitcrew"))
}

/// Whether this process runs with effective uid 0.
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Makes writes to a closed pipe fail with `EPIPE` instead of killing pitcrew with SIGPIPE:
/// a dead transport's (reported with context) and a closed stdout's or stderr's
/// ([`crate::output`]). Called first thing in `main`, for every command; the children pitcrew
/// starts get the default disposition back (`std::process::Command` restores it).
pub fn ignore_sigpipe() {
    // libc, not rustix: rustix has no safe call that sets a signal's disposition (its
    // `runtime` sigaction is for implementing a libc, not for use beside one).
    // SAFETY: changes only this process's SIGPIPE disposition; called at the start of `main`,
    // before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

#[cfg(test)]
mod tests;
