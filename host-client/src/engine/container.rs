//! The `podman` and `docker` engines: pitcrew creates the sandbox's container, with
//! `pitcrew-init` as its PID 1, reaches the supervisor through `<cli> exec -i <id> pitcrew-init
//! attach`, and removes the container when the run ends (unless `--keep`).
//!
//! The container is created confined ([`ContainerEngine::run_args`]): `no-new-privileges`,
//! every capability dropped but the ones `pitcrew-init` needs ([`CAPABILITIES`]), no network
//! unless one is named, pids and memory limits from the harness (plus room for the supervisor),
//! a read-only root filesystem with writable anonymous volumes only where the supervisor writes
//! (the uploads root and the records) and tmpfs on `/run` and `/tmp`. Labels ([`LABEL_SANDBOX`] and
//! friends) are how `ps`, `inspect`, `collect`, `cancel` and `down` find the sandbox again and
//! tell a container pitcrew made from one it did not.
//!
//! The container is never created with `--rm`: when its supervisor dies (PID 1 exits), it stays,
//! stopped, with its records, until `down` removes it (`container/stored.rs`: why it died, and
//! its records read with `<cli> cp`). `down` keeps a stopped container holding records the host
//! never collected, or whose log says why its supervisor died; `down --force` removes it.
//!
//! Both CLIs are driven the same way; the few differences (docker's `rm -f` kills without a
//! grace, its container names carry a leading `/` in `inspect`) are handled here.

use super::{Connection, Engine, SandboxEntry, SandboxId, SandboxSpec, StopOutcome};
use anyhow::{bail, Context as _};
use pitcrew_core::harness::SandboxLayout;
use serde_json::Value;
use std::ffi::OsString;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The label carrying the sandbox id on a container pitcrew created.
pub const LABEL_SANDBOX: &str = "pitcrew.sandbox";
/// The label naming the engine that created it.
pub const LABEL_ENGINE: &str = "pitcrew.engine";
/// The label naming the uploads root inside the container.
pub const LABEL_ROOT: &str = "pitcrew.root";
/// The label naming the pitcrew version that created it.
pub const LABEL_VERSION: &str = "pitcrew.version";

/// The capabilities `pitcrew-init` keeps; every other one is dropped (`--cap-drop ALL`). Each
/// is justified in `docs/operators.md`, and the agent ends with none of them.
pub const CAPABILITIES: [&str; 7] = [
    // chown uploads and the agent's directories to the agent's uid.
    "CHOWN",
    // Read, reset and remove what the agent wrote, whatever modes it set.
    "DAC_OVERRIDE",
    "FOWNER",
    // Signal and reap processes of the agent's uid.
    "KILL",
    // Become the agent's uid and groups.
    "SETUID",
    "SETGID",
    // Empty the agent's capability bounding set before the uid change.
    "SETPCAP",
];

/// Where uploads live inside the container (the image's layout).
pub const ROOT: &str = "/pitcrew";
/// Where the supervisor keeps its state inside the container (a volume of its own).
pub(super) const STATE: &str = "/var/lib/pitcrew";
/// The records directory inside the container: the supervisor's default, below [`STATE`].
const RECORDS: &str = pitcrew_core::server::DEFAULT_RECORDS;
/// Memory the supervisor and its `attach` connections may use beyond the agent's limit.
const SUPERVISOR_MEMORY: u64 = 256 << 20;
/// Processes the supervisor and its `attach` connections may use beyond the agent's limit.
const SUPERVISOR_PROCESSES: u64 = 64;
/// How long `start` waits for the supervisor to answer.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// The grace `stop` gives PID 1 between SIGTERM and SIGKILL, in seconds.
const STOP_GRACE_SECS: u32 = 15;

/// Which container CLI drives the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cli {
    /// `podman`.
    Podman,
    /// `docker` (its daemon from `DOCKER_HOST` or the default socket).
    Docker,
}

impl Cli {
    /// The program name, also the engine's name.
    pub fn program(self) -> &'static str {
        match self {
            Cli::Podman => "podman",
            Cli::Docker => "docker",
        }
    }
}

/// A podman or docker engine.
pub struct ContainerEngine {
    cli: Cli,
    image: Option<String>,
    network: String,
}

/// What `inspect` says of one container.
#[derive(Debug, Clone)]
pub struct Container {
    /// Its name.
    pub name: String,
    /// Its full id.
    pub container_id: String,
    /// The image it was created from.
    pub image: String,
    /// `running`, `exited`, `created`, …
    pub status: String,
    /// Whether it runs.
    pub running: bool,
    /// The sandbox id label, when pitcrew created it.
    pub sandbox_label: Option<String>,
    /// Its labels.
    pub labels: serde_json::Map<String, Value>,
    /// When it was created, as the engine prints it.
    pub created: String,
    /// The exit code of its PID 1, once it exited (0 while it runs; `None` when the engine does
    /// not say).
    pub exit_code: Option<i64>,
    /// Whether the kernel's OOM killer ended it.
    pub oom_killed: bool,
}

impl Container {
    /// Reads one element of `<cli> inspect`'s JSON array.
    fn from_inspect(v: &Value) -> Option<Container> {
        let labels = v["Config"]["Labels"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let image = v["ImageName"]
            .as_str()
            .or_else(|| v["Config"]["Image"].as_str())
            .unwrap_or_default()
            .to_string();
        Some(Container {
            name: v["Name"].as_str()?.trim_start_matches('/').to_string(),
            container_id: v["Id"].as_str().unwrap_or_default().to_string(),
            image,
            status: v["State"]["Status"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            running: v["State"]["Running"].as_bool().unwrap_or(false),
            sandbox_label: labels
                .get(LABEL_SANDBOX)
                .and_then(Value::as_str)
                .map(str::to_string),
            created: v["Created"].as_str().unwrap_or_default().to_string(),
            exit_code: v["State"]["ExitCode"].as_i64(),
            oom_killed: v["State"]["OOMKilled"].as_bool().unwrap_or(false),
            labels,
        })
    }

    /// Whether pitcrew created this container as sandbox `id`.
    pub fn created_by_pitcrew(&self, id: &SandboxId) -> bool {
        self.sandbox_label.as_deref() == Some(id.0.as_str())
    }
}

impl ContainerEngine {
    /// An engine driving `cli`; `image` is what new sandboxes are created from, `network` the
    /// network they join (`none` unless the operator names one).
    pub fn new(cli: Cli, image: Option<String>, network: Option<String>) -> ContainerEngine {
        ContainerEngine {
            cli,
            image,
            network: network.unwrap_or_else(|| "none".to_string()),
        }
    }

    /// Runs `<cli> args…` to its end.
    fn output(&self, args: &[&str]) -> anyhow::Result<std::process::Output> {
        let program = self.cli.program();
        Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("cannot run {program} (is it installed and on PATH?)"))
    }

    /// Runs `<cli> args…` and returns its stdout, or an error quoting its stderr.
    fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.output(args)?;
        if !out.status.success() {
            bail!(
                "{} {}: {}",
                self.cli.program(),
                args.first().copied().unwrap_or_default(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The container named `name`, or `None` when the engine has none by that name.
    pub fn inspect(&self, name: &str) -> anyhow::Result<Option<Container>> {
        let program = self.cli.program();
        let out = self.output(&["inspect", "--type", "container", "--", name])?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            // "no such container"; podman says "container not known" of one being removed
            // (`ps` listed it a moment before): gone either way.
            let lower = err.to_ascii_lowercase();
            if lower.contains("no such") || lower.contains("container not known") {
                return Ok(None);
            }
            bail!("{program} inspect {name}: {}", err.trim());
        }
        let doc: Value = serde_json::from_slice(&out.stdout)
            .with_context(|| format!("{program} inspect {name}: output is not JSON"))?;
        let first = doc.as_array().and_then(|a| a.first());
        Ok(first.and_then(Container::from_inspect))
    }

    /// The container of sandbox `id`, which must exist.
    fn container(&self, id: &SandboxId) -> anyhow::Result<Container> {
        self.inspect(&id.0)?.with_context(|| {
            format!(
                "no {} container named {id} (pitcrew ps lists the sandboxes)",
                self.cli.program()
            )
        })
    }

    /// The `<cli> run` arguments that create sandbox `id` from `image`.
    pub fn run_args(&self, id: &SandboxId, image: &str, spec: &SandboxSpec) -> Vec<String> {
        let mut a: Vec<String> = ["run", "--detach", "--name", &id.0]
            .map(str::to_string)
            .to_vec();
        for (label, value) in [
            (LABEL_SANDBOX, id.0.as_str()),
            (LABEL_ENGINE, self.cli.program()),
            (LABEL_ROOT, ROOT),
            (LABEL_VERSION, env!("CARGO_PKG_VERSION")),
        ] {
            a.push("--label".into());
            a.push(format!("{label}={value}"));
        }
        a.extend(["--security-opt", "no-new-privileges", "--cap-drop", "ALL"].map(str::to_string));
        for cap in CAPABILITIES {
            a.push("--cap-add".into());
            a.push(cap.into());
        }
        a.push(format!("--network={}", self.network));
        if self.cli == Cli::Podman {
            a.extend(podman_ulimits(&HostLimits::read()));
        }
        let memory = spec.memory_bytes.saturating_add(SUPERVISOR_MEMORY);
        let processes = spec.processes.saturating_add(SUPERVISOR_PROCESSES);
        a.push(format!("--pids-limit={processes}"));
        a.push(format!("--memory={memory}"));
        // No swap beyond the memory limit.
        a.push(format!("--memory-swap={memory}"));
        // System V shared memory outlives the processes that made it and is charged to the
        // container, not to any process: bound it by the agent's memory, and let it die with
        // its last user (the IPC namespace is the container's own, so these are its own).
        let pages = spec.memory_bytes / 4096;
        a.push(format!("--sysctl=kernel.shmmax={}", spec.memory_bytes));
        a.push(format!("--sysctl=kernel.shmall={pages}"));
        a.push("--sysctl=kernel.shm_rmid_forced=1".into());
        // Only an image the engine has: a mistyped name is an error, never a pull of whatever
        // a registry holds under it.
        a.push("--pull=never".into());
        a.push("--read-only".into());
        a.extend(
            [
                "--tmpfs",
                "/run:rw,nosuid,nodev,mode=0755",
                "--tmpfs",
                "/tmp:rw,nosuid,nodev,mode=1777",
                "--volume",
                ROOT,
                "--volume",
                STATE,
            ]
            .map(str::to_string),
        );
        for name in &spec.pass_env {
            // `-e NAME` takes the value from pitcrew's own environment (and nothing when unset);
            // a model credential's placeholder is given as a value instead.
            a.push("--env".into());
            if spec.placeholders.contains(name) {
                a.push(format!(
                    "{name}={}",
                    pitcrew_core::manifest::model::placeholder(name)
                ));
            } else {
                a.push(name.clone());
            }
        }
        if !spec.pass_env.is_empty() {
            // Which they are, for every later run of this sandbox (whose manifest cannot say).
            a.push("--env".into());
            a.push(format!(
                "{}={}",
                pitcrew_core::environment::PASSED_AT_START,
                spec.pass_env.join(",")
            ));
        }
        a.push(image.to_string());
        let serve = spec.serve_args();
        if !serve.is_empty() {
            // The image's entrypoint is pitcrew-init, whose default command is `serve`.
            a.push("serve".into());
            a.extend(serve);
        }
        a
    }

    /// Waits until the supervisor of the just-created `id` answers, or explains why not.
    fn wait_ready(&self, id: &SandboxId) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            let err = match self.connect(id) {
                Ok(conn) => {
                    conn.close();
                    return Ok(());
                }
                Err(err) => err,
            };
            let c = self.container(id)?;
            if !c.running {
                bail!(
                    "sandbox {id}: the container is {} before its supervisor answered; it said: {}",
                    c.status,
                    self.logs_tail(id)
                );
            }
            if start.elapsed() > START_TIMEOUT {
                return Err(err).context(format!(
                    "sandbox {id}: its supervisor did not answer within {}s (logs: {})",
                    START_TIMEOUT.as_secs(),
                    self.logs_tail(id)
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The last lines the container printed, on one line.
    fn logs_tail(&self, id: &SandboxId) -> String {
        match self.log_lines(id, 5) {
            Ok(lines) if lines.is_empty() => "(nothing)".into(),
            Ok(lines) => lines.join(" | "),
            Err(e) => format!("(logs unavailable: {e:#})"),
        }
    }

    /// Stops the container: SIGTERM to PID 1, SIGKILL after [`STOP_GRACE_SECS`].
    fn stop_container(&self, id: &SandboxId) -> anyhow::Result<()> {
        self.cli(&["stop", "--time", &STOP_GRACE_SECS.to_string(), &id.0])?;
        Ok(())
    }

    /// Removes the container and its anonymous volumes, stopping it first with a grace.
    fn remove(&self, id: &SandboxId) -> anyhow::Result<()> {
        // `stop` first: docker's `rm -f` kills PID 1 without the SIGTERM grace.
        let _ = self.stop_container(id);
        self.cli(&["rm", "--force", "--volumes", &id.0])
            .with_context(|| format!("sandbox {id}: removing its container"))?;
        Ok(())
    }
}

/// The limits of this process that bound what podman may give the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostLimits {
    /// The hard `RLIMIT_NOFILE` (`None`: unlimited).
    pub nofile: Option<u64>,
    /// The hard `RLIMIT_NPROC` (`None`: unlimited).
    pub nproc: Option<u64>,
    /// `/proc/sys/kernel/pid_max`, when readable.
    pub pid_max: Option<u64>,
}

impl HostLimits {
    /// This process's hard limits and the kernel's `pid_max`.
    pub fn read() -> HostLimits {
        use rustix::process::{getrlimit, Resource};
        let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|s| s.trim().parse().ok());
        HostLimits {
            nofile: getrlimit(Resource::Nofile).maximum,
            nproc: getrlimit(Resource::Nproc).maximum,
            pid_max,
        }
    }
}

/// `--ulimit` options giving a podman container the open-file and process limits this process
/// has, never more.
///
/// Podman run as root asks the OCI runtime for `nofile=1048576:1048576` and `nproc` up to the
/// kernel's `pid_max` unless told otherwise, and raising a hard limit needs `CAP_SYS_RESOURCE`:
/// where the caller lacks it (podman inside a container, a CI job) the container never starts
/// (runc: "error setting rlimit type 7: operation not permitted"). Limits no higher than the
/// caller's can always be set, so they are named here: `nofile` is this process's hard limit,
/// `nproc` that limit bounded by `pid_max` (podman lowers its own `RLIMIT_NPROC` to `pid_max`
/// when it starts, and the runtime inherits that). Soft equals hard, as in podman's own
/// defaults. A limit this process does not have (unlimited) is left to podman.
pub fn podman_ulimits(limits: &HostLimits) -> Vec<String> {
    let mut a = Vec::new();
    if let Some(nofile) = limits.nofile {
        a.push("--ulimit".to_string());
        a.push(format!("nofile={nofile}:{nofile}"));
    }
    let nproc = match (limits.nproc, limits.pid_max) {
        (Some(n), Some(max)) => Some(n.min(max)),
        (n, max) => n.or(max),
    };
    if let Some(nproc) = nproc {
        a.push("--ulimit".to_string());
        a.push(format!("nproc={nproc}:{nproc}"));
    }
    a
}

/// What to add to a failed `podman run`'s error when the runtime could not set a resource
/// limit: where the hint applies, the settings that get past it.
fn rlimit_hint(cli: Cli, err: &str) -> Option<String> {
    (cli == Cli::Podman && err.contains("error setting rlimit")).then(|| {
        "the OCI runtime could not set a resource limit (raising one needs CAP_SYS_RESOURCE): \
         set `default_ulimits = []` under [containers] in a containers.conf and point \
         CONTAINERS_CONF at it (images/containers.conf in pitcrew's repository does so)"
            .to_string()
    })
}

impl Engine for ContainerEngine {
    fn name(&self) -> &'static str {
        self.cli.program()
    }

    fn start(&self, spec: &SandboxSpec) -> anyhow::Result<SandboxId> {
        if let Some(name) = &spec.existing {
            let id = SandboxId(name.clone());
            let c = self.container(&id)?;
            if !c.running {
                bail!(
                    "sandbox {id}: its container is not running ({}); `pitcrew collect {id}` \
                     reads its records, `pitcrew down {id}` removes it",
                    c.exit_summary()
                );
            }
            if let Some(n) = spec.pass_env.first() {
                bail!("--pass-env {n}: sandbox {id} exists already; its environment was set when it was created");
            }
            self.connect(&id)?.close();
            return Ok(id);
        }
        super::check_pass_env_names(&spec.pass_env, &[])?;
        if let Some(name) = spec.pass_env.iter().find(|n| std::env::var_os(n).is_none()) {
            bail!("--pass-env {name}: not set in pitcrew's environment");
        }
        let image = self.image.as_deref().with_context(|| {
            format!(
                "--engine {} creates the sandbox's container: pass --image IMAGE (scripts/build-image pi|claude prints one)",
                self.cli.program()
            )
        })?;
        let id = SandboxId(super::random_id()?);
        let args = self.run_args(&id, image, spec);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        if let Err(err) = self.cli(&args) {
            // `run` can fail after creating the container (an entrypoint that does not exist):
            // nothing stays behind.
            if self.inspect(&id.0).ok().flatten().is_some() {
                if let Err(e) = self.remove(&id) {
                    tracing::warn!("{e:#}");
                }
            }
            let err = match rlimit_hint(self.cli, &format!("{err:#}")) {
                Some(hint) => err.context(hint),
                None => err,
            };
            return Err(err)
                .with_context(|| format!("sandbox {id}: creating its container from {image}"));
        }
        // A sandbox that does not come up leaves no container behind.
        if let Err(err) = self.wait_ready(&id) {
            if let Err(e) = self.remove(&id) {
                tracing::warn!("{e:#}");
            }
            return Err(err);
        }
        Ok(id)
    }

    fn connect(&self, id: &SandboxId) -> anyhow::Result<Connection> {
        let argv: Vec<OsString> = [self.cli.program(), "exec", "-i", &id.0]
            .into_iter()
            .chain(["pitcrew-init", "attach"])
            .map(OsString::from)
            .collect();
        Connection::spawn(
            &argv,
            &format!(
                "sandbox {id} ({} exec -i {id} pitcrew-init attach)",
                self.cli.program()
            ),
        )
    }

    fn owns(&self, id: &SandboxId) -> anyhow::Result<bool> {
        Ok(self.container(id)?.created_by_pitcrew(id))
    }

    fn stop(&self, id: &SandboxId, keep_state: bool) -> anyhow::Result<StopOutcome> {
        let c = self.container(id)?;
        let mut outcome = StopOutcome::default();
        if !c.created_by_pitcrew(id) {
            // Only reached with `down --force`: stop it, never remove what pitcrew did not make.
            if c.running {
                self.stop_container(id)?;
            }
            outcome.warning = Some(format!(
                "pitcrew did not create container {id} (no {LABEL_SANDBOX} label): stopped, not removed"
            ));
            return Ok(outcome);
        }
        if keep_state {
            if c.running {
                self.stop_container(id)?;
            }
            return Ok(outcome);
        }
        self.remove(id)?;
        Ok(outcome)
    }

    fn layout(&self, id: &SandboxId) -> anyhow::Result<SandboxLayout> {
        let c = self.container(id)?;
        let root = c
            .labels
            .get(LABEL_ROOT)
            .and_then(Value::as_str)
            .unwrap_or(ROOT);
        if !root.starts_with('/') {
            bail!("sandbox {id}: its {LABEL_ROOT} label {root:?} is not an absolute path");
        }
        Ok(SandboxLayout {
            root: root.trim_end_matches('/').to_string(),
        })
    }

    fn describe(&self, id: &SandboxId) -> anyhow::Result<Value> {
        let c = self.container(id)?;
        Ok(describe(self.cli, &c))
    }

    fn supervisor_gone(&self, id: &SandboxId) -> Option<super::Gone> {
        self.gone(id)
    }

    fn stored_uncollected(&self, id: &SandboxId) -> Option<Vec<u32>> {
        self.uncollected(id)
    }

    fn stored_record(
        &self,
        id: &SandboxId,
        iteration: Option<u32>,
    ) -> anyhow::Result<Option<(u32, Box<dyn std::io::Read + Send>)>> {
        self.record(id, iteration)
    }

    fn mark_stored_collected(&self, id: &SandboxId, iteration: u32) -> anyhow::Result<()> {
        self.mark_collected(id, iteration)
    }

    fn log_source(&self, id: &SandboxId, follow: bool) -> anyhow::Result<super::LogSource> {
        // PID 1's output is the container's: `<cli> logs`, which ends with the container when
        // following (or when it is removed). An unknown id is an error naming it here, not the
        // CLI's own error printed as if it were the log.
        self.container(id)?;
        let mut cmd = Command::new(self.cli.program());
        cmd.arg("logs");
        if follow {
            cmd.arg("--follow");
        }
        cmd.arg(&id.0).stdin(Stdio::null());
        Ok(super::LogSource::Command(cmd))
    }

    fn list(&self) -> anyhow::Result<Vec<SandboxEntry>> {
        let filter = format!("label={LABEL_SANDBOX}");
        let ids = self.cli(&["ps", "--all", "--quiet", "--no-trunc", "--filter", &filter])?;
        let mut out = Vec::new();
        for cid in ids.split_whitespace() {
            // One at a time: a container removed since `ps` is just not listed.
            let Some(c) = self.inspect(cid)? else {
                continue;
            };
            // Only what pitcrew created: the label names the container itself (a container
            // copied from a sandbox's image, or labelled by hand, is not that sandbox).
            let Some(id) = c.sandbox_label.clone().filter(|l| *l == c.name) else {
                continue;
            };
            out.push(SandboxEntry {
                id,
                engine: self.cli.program().into(),
                running: c.running,
                // `stopped` only once PID 1 exited; a paused container, or one created and not
                // started yet, shows its own status.
                state: if c.running {
                    "running".to_string()
                } else if c.exited() {
                    "stopped".to_string()
                } else {
                    c.status.clone()
                },
                detail: describe(self.cli, &c),
            });
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }
}

/// A container as `inspect --json` and `ps --json` show it.
fn describe(cli: Cli, c: &Container) -> Value {
    let mut v = serde_json::json!({
        "engine": cli.program(),
        "id": c.sandbox_label.clone().unwrap_or_else(|| c.name.clone()),
        "container": c.name,
        "container_id": c.container_id,
        "image": c.image,
        "running": c.running,
        "state": c.status,
        "created": c.created,
        "created_by_pitcrew": c.sandbox_label.as_deref() == Some(c.name.as_str()),
        "root": c.labels.get(LABEL_ROOT).and_then(Value::as_str).unwrap_or(ROOT),
    });
    // How its supervisor ended, for `ps` (the container stops with it).
    if c.exited() {
        v["exit_code"] = c.exit_code.into();
        v["oom_killed"] = c.oom_killed.into();
        v["state_detail"] = format!("its supervisor {}", c.exit_summary()).into();
    }
    v
}

mod stored;
#[cfg(test)]
mod tests;
