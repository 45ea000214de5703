//! The result record of one iteration: what happened at each step, and the exit code.
//!
//! Written by `pitcrew-init run` to `--result FILE` (atomically) or `--result-fd N`, read by the
//! host. Schema reference: `docs/result-record.md`. Every exit code that is not the agent's own
//! comes with a machine-readable `reason` of the form `<kind>: <detail>`.

use crate::exit_code;
use crate::manifest::LandlockMode;
use crate::verify::VerifyReport;
use serde::{Deserialize, Serialize};

/// The result record format version this build writes.
pub const RESULT_VERSION: u32 = 1;

/// The whole record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IterationResult {
    /// Format version ([`RESULT_VERSION`]).
    pub version: u32,
    /// Iteration number (1-based), as given by the caller.
    pub iteration: u32,
    /// The iteration's exit code ([`crate::exit_code`]).
    pub exit_code: i32,
    /// One-line meaning of `exit_code` ([`exit_code::meaning`]).
    pub meaning: String,
    /// The signal that killed the agent (`SIGTERM`), when it was killed by one.
    #[serde(default)]
    pub signal: Option<String>,
    /// Machine-readable reason, `<kind>: <detail>`; set for every code that is not the agent's.
    #[serde(default)]
    pub reason: Option<String>,
    /// How the supervisor ran.
    pub supervisor: SupervisorInfo,
    /// Wall-clock time of each step, in milliseconds.
    #[serde(default)]
    pub steps: StepTimes,
    /// Processes killed by the reap before and after the agent.
    #[serde(default)]
    pub reaped: ReapCounts,
    /// What was removed from `dirs.config` before verifying (absent when nothing was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_reset: Option<ResetRecord>,
    /// The feedback appended to this iteration's prompt (`run`'s `feedback`): its length and
    /// digest; the text is in the previous iteration's validation output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<FeedbackRecord>,
    /// What an earlier agent left in `HOME` and was removed before this iteration (absent when
    /// nothing was); only `dirs.home_keep` and the manifest's own paths stay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home_reset: Option<ResetRecord>,
    /// What an earlier agent left in `TMPDIR` and was removed (absent when nothing was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp_reset: Option<ResetRecord>,
    /// What the workspace's `output/` held and was removed before this iteration (absent when
    /// nothing was, or `output.keep_output`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_reset: Option<ResetRecord>,
    /// What an earlier agent left in the sandbox's IPC namespace and `/dev/shm` and was removed
    /// before this iteration (PID 1 without a private IPC namespace, e.g. a container; absent
    /// when nothing was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipc_sweep: Option<IpcSweepRecord>,
    /// What the supervisor set back of its own state after a reap of this iteration: limits
    /// and directory modes some process of its uid had changed (absent when nothing was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supervisor_restored: Option<SupervisorRestored>,
    /// Runtime configuration files in the workspace that the runtime reads unverified and no
    /// flag switches off (`.pi/settings.json` for pi), found before launch; absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workspace_config: Vec<String>,
    /// Claude Code's config dir during the iteration: the names it loads from there that were
    /// root's and read-only to the agent, and those the agent could still write (absent for
    /// other runtimes, and when the iteration stopped before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claude_config: Option<crate::claude_user_settings::ClaudeConfigRecord>,
    /// pi's config dir during the iteration: the names pi reads there that were root's and
    /// read-only to the agent (absent for other runtimes, a supervisor that is not root, and
    /// when the iteration stopped before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pi_config: Option<crate::pi_config::PiConfigRecord>,
    /// Codex's config dir (`CODEX_HOME`) during the iteration: the names Codex reads there
    /// that were root's and read-only to the agent (absent for other runtimes, a supervisor
    /// that is not root, and when the iteration stopped before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codex_config: Option<crate::codex_config::CodexConfigRecord>,
    /// OpenCode's configuration (`OPENCODE_CONFIG_CONTENT` as pitcrew wrote it, the key
    /// hidden) and the config dirs that were root's and read-only to the agent (absent for
    /// other runtimes, and when the iteration stopped before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opencode_config: Option<crate::opencode_config::OpencodeConfigRecord>,
    /// Node's global module folders in `HOME` that were root's empty directories while the
    /// agent ran (`.node_modules`, `.node_libraries`; absent when the supervisor is not root or
    /// the agent is, and when the iteration stopped before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub home_guarded: Vec<String>,
    /// The context files the runtime reads (`agent.context_files`), found after the reap and
    /// before launch, and what was reset of them (absent for `command`, and when the iteration
    /// stopped before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_files: Option<ContextFilesRecord>,
    /// The verification report (absent when the iteration failed before verifying).
    #[serde(default)]
    pub verification: Option<VerifyReport>,
    /// What the environment step removed or refused (names only).
    #[serde(default)]
    pub env: EnvRecord,
    /// What confinement was applied, as confirmed from inside the child.
    #[serde(default)]
    pub confinement: Option<ConfinementRecord>,
    /// The launched agent (absent when nothing was launched).
    #[serde(default)]
    pub agent: Option<AgentRecord>,
    /// Tokens and cost of the iteration as the runtime reported them in its JSON stream (pi,
    /// Claude Code; absent for `command`, and when the stream says nothing of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageRecord>,
    /// The filesystem holding the records was full when the iteration ended (absent when it
    /// was not, or when the supervisor does not keep records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_full: Option<DiskFull>,
    /// What the agent reached over the network (absent when the manifest has no `network`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkRecord>,
    /// What the host removed from the collected workspace (`workspace/`) because git would run
    /// it, or read it as configuration, at the operator's next git command there: hooks, keys
    /// of a repository's configuration outside the allowlist, `info/attributes`, a `.git` file
    /// naming a directory outside the workspace. Written by the host into its copy of the
    /// record when it unpacks it; the supervisor never sets it (what one says is replaced).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workspace_stripped: Vec<String>,
    /// What the host kept in the collected workspace but names: `.gitattributes` lines that
    /// set a filter, or a diff or merge driver git does not define itself (they run only a
    /// command the operator's own git configuration defines). Written by the host, like
    /// `workspace_stripped`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workspace_flagged: Vec<String>,
}

/// The most connections one record lists before it stops listing refused attempts (counted in
/// [`NetworkRecord::dropped`] instead); a connection that was carried is listed however many
/// came before it.
pub const MAX_RECORDED_CONNECTIONS: usize = 1000;

/// The iteration's network: the manifest's policy and every connection attempt that reached
/// pitcrew's listeners in the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct NetworkRecord {
    /// `none`, `allow`, `open` or `platform`.
    pub mode: String,
    /// The network namespace the agent ran in: `sandbox` (the sandbox's own) or `agent` (one
    /// of its own, made for the iteration inside a sandbox that has a network); absent when
    /// the agent was not launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// How the agent's own network namespace was made (`namespace: agent`): `unshare` (the
    /// supervisor holds `CAP_SYS_ADMIN`) or `user-namespace` (inside an unprivileged user
    /// namespace of its own, the supervisor lacking it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_via: Option<String>,
    /// Under `platform`, the platform whose own policy held the agent (`openshell`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// The endpoints allowed, as `host:port`.
    #[serde(default)]
    pub allow: Vec<String>,
    /// `sandbox` when the supervisor dialled the allowed connections (but model connections)
    /// from the sandbox's network namespace; absent when the host dialled them (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The connection attempts, in the order they came (at most
    /// [`MAX_RECORDED_CONNECTIONS`]).
    #[serde(default)]
    pub connections: Vec<ConnectionRecord>,
    /// Refused attempts past [`MAX_RECORDED_CONNECTIONS`], not listed (every connection that
    /// was carried is).
    #[serde(default)]
    pub dropped: u64,
    /// Why the iteration's network could not be set up as asked (a listener that could not be
    /// bound), when that happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Host directories of Unix socket files hidden from the agent by an empty tmpfs (`/run`:
    /// the local engine's sandboxes with a network namespace of their own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<String>,
    /// The model route the host added credentials on (the manifest's `model`), when there was
    /// one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelRouteRecord>,
}

/// The model route of an iteration: where the model connections went and which credentials
/// stayed on the host (names, never values).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelRouteRecord {
    /// The provider's endpoint, `host:port`.
    pub upstream: String,
    /// The variable pinned to the model listener (`ANTHROPIC_BASE_URL`), or absent when the
    /// mirror of `upstream` carried the model connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url_env: Option<String>,
    /// The pi provider whose `baseUrl` was set to `listener`: in the supervisor's own
    /// `models.json` in pi's config dir, or in the pinned one the host rewrote (absent for
    /// other routes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pi_provider: Option<String>,
    /// With `pi_provider`: the harness pinned pi's `models.json`, and the host rewrote that
    /// provider's `baseUrl` to `listener` (the file verified is the rewritten one; the
    /// harness's own is named by its SHA-256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewritten_models_json: Option<crate::manifest::model::RewrittenModelsJson>,
    /// The supervisor's model listener the runtime was pointed at, `http://127.0.0.1:<port>`
    /// (absent when the mirror of `upstream` carried the model connections).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listener: Option<String>,
    /// The credentials the host kept, by variable name; the sandbox had their placeholders.
    pub credentials: Vec<String>,
}

/// One connection attempt of the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionRecord {
    /// The host as the agent named it.
    pub host: String,
    /// The port.
    pub port: u16,
    /// `mirror` (a listener on an allowed loopback address), `proxy` (the `CONNECT` proxy)
    /// or `model` (the model listener the route's base-URL variable names).
    pub via: String,
    /// Whether the connection was carried.
    pub allowed: bool,
    /// Why it was refused, or how it ended when not in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Bytes from the agent to the endpoint.
    pub bytes_up: u64,
    /// Bytes from the endpoint to the agent.
    pub bytes_down: u64,
    /// From the agent's connect to the close, in milliseconds.
    pub duration_ms: u64,
    /// The model credentials the host put in place of their placeholders on this connection,
    /// by variable name (never a value).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub injected: Vec<String>,
    /// `sandbox` when the supervisor dialled it from the sandbox's network namespace
    /// (`network: {allow: […], from: sandbox}`); absent when the host carried it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

/// A full filesystem under the records, found when an iteration ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskFull {
    /// The records directory on it.
    pub path: String,
    /// Bytes an unprivileged writer could still allocate there.
    pub free_bytes: u64,
}

/// How the supervisor ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisorInfo {
    /// Whether it was PID 1 of its PID namespace.
    pub pid1: bool,
    /// `pid1`, or `degraded` when it could not be.
    pub mode: SupervisorMode,
    /// Why the mode is degraded.
    #[serde(default)]
    pub degraded_reason: Option<String>,
}

/// Whether the supervisor could use the PID-1 reap (`kill(-1)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SupervisorMode {
    /// PID 1 of the PID namespace: every process in the sandbox is ours to kill.
    Pid1,
    /// Not PID 1: child subreaper, descendants found through `/proc`.
    Degraded,
    /// Not PID 1 and not root, under someone else's init (an exec session of the sandbox's
    /// user), asked for with `--unprivileged`: every process of the supervisor's own uid but its ancestors is the reap's, found
    /// through `/proc` whoever its parent is; processes of other uids are out of reach, and
    /// the agent runs as that same uid.
    Unprivileged,
}

impl SupervisorMode {
    /// The mode's name in records and `hello`.
    pub fn name(self) -> &'static str {
        match self {
            SupervisorMode::Pid1 => "pid1",
            SupervisorMode::Degraded => "degraded",
            SupervisorMode::Unprivileged => "unprivileged",
        }
    }
}

/// Milliseconds spent in each step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepTimes {
    /// Step 1, the reap before verification.
    pub reap_ms: u64,
    /// Step 2, verification.
    pub verify_ms: u64,
    /// Step 3, building the environment.
    pub env_ms: u64,
    /// Steps 4 and 5, preparing confinement, forking and exec.
    pub confine_launch_ms: u64,
    /// Step 6, from exec to the agent's exit.
    pub agent_ms: u64,
    /// The reap after the agent.
    pub final_reap_ms: u64,
}

/// Processes killed by each reap (distinct pids seen or reaped, not counting the supervisor).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReapCounts {
    /// Killed by the reap before verification.
    pub before: u64,
    /// Killed by the reap after the agent (the agent itself excluded).
    pub after: u64,
    /// Processes still present when the final reap's budget ran out (normally 0).
    #[serde(default)]
    pub remaining_after: u64,
}

/// What the supervisor found changed of its own state after a reap and set back: its
/// resource limits (which any process of its uid may set, in the unprivileged mode the agent's
/// too, were it not for the seccomp filter) and the modes of the directories of its uid on its
/// paths (which Landlock does not keep the agent from changing).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisorRestored {
    /// `NAME soft/hard -> soft/hard` of each resource limit set back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<String>,
    /// Limits whose hard value was lowered and cannot be raised again, as they now are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits_lowered: Vec<String>,
    /// `PATH OLD -> NEW` (octal) of each directory given its mode back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modes: Vec<String>,
    /// Directories that could not be given their mode back, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modes_failed: Vec<String>,
}

/// What a reset before the iteration removed from a directory of the agent: the config
/// directory brought back to the pinned files (`config_reset`), `HOME` and `TMPDIR` emptied (`dir_reset`)
/// (`home_reset`, `tmp_reset`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResetRecord {
    /// How many entries were removed (a directory counts once).
    pub removed: u64,
    /// The first 100 of them, relative to the directory.
    #[serde(default)]
    pub paths: Vec<String>,
}

/// The context files of an iteration (`context_files`): the choice, what the runtime reads,
/// and what was reset to the run's baseline before launch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextFilesRecord {
    /// `as-is`, `uploaded` or `none` (`agent.context_files`).
    pub mode: String,
    /// `uploaded`: the iteration whose reap was followed by taking the baseline (the first
    /// after the workspace was uploaded or the manifest set; in `pitcrew-init run`, this one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_iteration: Option<u32>,
    /// The files the runtime reads, in the order it reads them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<ContextFileRecord>,
    /// `uploaded`: what differed from the baseline and was set back before launch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reset: Vec<ContextResetRecord>,
    /// Claude Code under `as-is`: it puts a snapshot of the workdir's git repository (branch,
    /// `git status`, the last commits and their messages) into the model's context; under
    /// `uploaded` and `none` it is turned off (`CLAUDE_CODE_DISABLE_GIT_INSTRUCTIONS=1`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub git_status: bool,
}

/// A context file the runtime reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextFileRecord {
    /// Its absolute path.
    pub path: String,
    /// `config` (the runtime's config dir: pinned files only), `workdir`, `parent` (a
    /// directory above the workdir), or `nested` (OpenCode: below the workdir, handed to the
    /// model with a file its `read` tool reads there).
    pub scope: String,
    /// SHA-256 of its content (a regular file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Its size in bytes (a regular file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// What a symlink points to: the runtime follows it, the supervisor does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

/// A context file set back to the run's baseline before launch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextResetRecord {
    /// Its absolute path.
    pub path: String,
    /// `removed` (not in the baseline) or `restored` (the baseline's content, mode and owner
    /// written back).
    pub action: String,
    /// What was there before (`regular file`, `symlink`, `directory`, `fifo`, …; `missing`).
    pub was: String,
}

/// What the IPC sweep removed (`ipc_sweep`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpcSweepRecord {
    /// Entries removed from `/dev/shm` and `/dev/mqueue` (a directory and what was below it
    /// counted).
    pub shm_entries: u64,
    /// System V shared memory segments, semaphore sets and message queues removed.
    pub sysv_objects: u64,
}

/// What the environment step reported, copied as it reported it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EnvRecord {
    /// Removed variables (names and the rule that removed them, never values).
    #[serde(default)]
    pub removed: Vec<crate::environment::RemovedVar>,
    /// `.env` entries that were refused.
    #[serde(default)]
    pub dotenv_refused: Vec<crate::dotenv::DotenvRefusal>,
    /// Baseline variables skipped because their name or value is not UTF-8 (lossy names).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub baseline_non_utf8: Vec<String>,
    /// The layer that set each variable of the agent's environment, by name (never values):
    /// `baseline`, `dotenv`, `harness`, `pin` or `plugin:<tree path>`; empty when the
    /// environment was not built.
    #[serde(default)]
    pub layers: std::collections::BTreeMap<String, String>,
    /// Entries of the `PATH` a layer gave that the agent's `PATH` does not keep: empty,
    /// relative, or in a directory of the agent's (absent when none was dropped).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_dropped: Vec<String>,
}

/// Confinement as confirmed by the child just before exec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfinementRecord {
    /// The agent's user id.
    pub uid: u32,
    /// The agent's primary group id.
    pub gid: u32,
    /// The agent's supplementary groups.
    pub groups: Vec<u32>,
    /// `PR_SET_NO_NEW_PRIVS` is set (read back).
    pub no_new_privs: bool,
    /// Effective, permitted, inheritable, ambient and bounding sets are empty (read back).
    pub caps_cleared: bool,
    /// Landlock.
    pub landlock: LandlockRecord,
    /// The seccomp filter installed on the agent's process tree.
    #[serde(default)]
    pub seccomp: SeccompRecord,
    /// The limits of the agent's process tree and what enforced them.
    #[serde(default)]
    pub limits: LimitsRecord,
}

/// The limits of the agent's process tree, and what enforced each.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitsRecord {
    /// `limits.processes`: processes and threads at once.
    pub processes: LimitRecord,
    /// `limits.memory_bytes`: memory in use at once.
    pub memory: LimitRecord,
    /// `RLIMIT_CORE`: 0, no core files.
    pub core: u64,
    /// `limits.disk_bytes`, when the manifest sets a budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskLimitRecord>,
}

/// The agent's disk budget: `RLIMIT_FSIZE` on each file, and the growth of the used space of
/// each filesystem it can write, sampled while it ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskLimitRecord {
    /// `limits.disk_bytes`: the most the used space of any one watched filesystem may grow.
    pub limit: u64,
    /// `RLIMIT_FSIZE` of the agent: no file may grow past it.
    pub file_size_limit: u64,
    /// How often the used space was sampled, in milliseconds.
    pub sample_ms: u64,
    /// Each watched filesystem, named by the first writable root on it.
    pub filesystems: Vec<FilesystemGrowth>,
    /// Whether a filesystem grew past the limit.
    pub exceeded: bool,
}

/// How much one filesystem's used space grew during the iteration (everyone's writes count).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesystemGrowth {
    /// The first writable root on it.
    pub root: String,
    /// The most it grew at any sample, in bytes (each new inode counted as 4096).
    pub peak_growth: u64,
    /// The most inodes it gained at any sample.
    #[serde(default)]
    pub peak_inodes: u64,
    /// What it grew by at the last sample, after the final reap (negative: space was freed).
    pub end_growth: i64,
}

/// One limit of the agent's tree.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitRecord {
    /// The limit (processes, or bytes).
    pub limit: u64,
    /// What enforced it, and so what it counts.
    pub enforced_by: Enforcement,
    /// The agent's cgroup, when one enforced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// Why no cgroup enforced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_unavailable: Option<String>,
    /// The most the tree used at once (cgroup only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak: Option<u64>,
    /// Forks the process limit refused (cgroup only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused_forks: Option<u64>,
    /// Processes the kernel killed at the memory limit (cgroup only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_kills: Option<u64>,
}

/// The mechanism behind a limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enforcement {
    /// A cgroup v1 of the iteration's own: counts the whole tree, nothing else.
    #[default]
    CgroupV1,
    /// `RLIMIT_NPROC`: counts every process of the agent's uid, other sandboxes' included.
    RlimitNproc,
    /// `RLIMIT_DATA`: bounds each process's data on its own, not the tree's sum.
    RlimitData,
}

/// The seccomp filter of the agent's process tree: what keeps the agent's tools from rewriting
/// the runtime that runs them (its memory, its descriptors, its inspector).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeccompRecord {
    /// Whether the filter was installed (read back with `PR_GET_SECCOMP`).
    pub installed: bool,
    /// Why it was not installed (an architecture the filter does not know).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// The system calls refused with `EPERM`.
    #[serde(default)]
    pub denied_syscalls: Vec<String>,
    /// The system calls the tree may make on itself only (a process id of 0; for
    /// `setpriority` and `ioprio_set` not a whole user): refused with `EPERM` on any other
    /// process, the supervisor included, which in the unprivileged mode shares the agent's uid.
    #[serde(default)]
    pub self_only_syscalls: Vec<String>,
    /// Signals no process of the tree may send (`SIGUSR1`: it opens Node's inspector).
    #[serde(default)]
    pub denied_signals: Vec<String>,
    /// `fcntl` commands refused (`F_SETSIG`: it would let the kernel send `SIGUSR1` for us).
    #[serde(default)]
    pub denied_fcntl: Vec<String>,
    /// The system calls that fail with `EOPNOTSUPP`: setting extended attributes (ACLs
    /// included), and `fallocate` with a disk budget.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsupported_syscalls: Vec<String>,
    /// The system calls that fail with `ENOSYS`, as on a kernel without them (`io_uring_*`: a
    /// ring's operations would pass this filter unseen).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub absent_syscalls: Vec<String>,
    /// The only address families `socket` and `socketpair` create (others fail with
    /// `EAFNOSUPPORT`: `AF_VSOCK` reaches the hypervisor whatever the network namespace).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub socket_families: Vec<String>,
}

/// What Landlock enforced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockRecord {
    /// The kernel's Landlock ABI version (0: not available).
    pub abi: u32,
    /// Why the kernel offers no Landlock, when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// What was enforced.
    pub status: LandlockState,
    /// The mode the launch ran with (the manifest's; `required` in the unprivileged mode).
    pub mode: LandlockMode,
    /// Verified paths that lie under an agent-writable root (Landlock cannot make them
    /// read-only; ownership still protects them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overlaps: Vec<String>,
    /// Agent-writable roots left read-only because they hold a verified path (the unprivileged
    /// mode, where the agent's uid owns the verified files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withheld: Vec<String>,
}

/// Landlock enforcement status (`landlock::RulesetStatus`, plus `off`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LandlockState {
    /// Every requested right is enforced.
    FullyEnforced,
    /// Enforced with the rights this kernel knows (older ABI than pinned).
    PartiallyEnforced,
    /// The kernel does not support Landlock (or it is disabled).
    NotEnforced,
    /// The manifest turned Landlock off.
    Off,
}

/// The launched agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRecord {
    /// The program that was executed (the resolved absolute path).
    pub argv0: String,
    /// The whole argv it was given (an `env` interpreter first), the prompt shown as
    /// `<prompt>` unless the manifest's `agent.record_prompt` says to show it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub argv: Vec<String>,
    /// The prompt the argv carried: where, how long, its SHA-256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<PromptRecord>,
    /// Its pid in the supervisor's PID namespace.
    pub pid: i32,
    /// Whether the timeout ended it.
    pub timed_out: bool,
    /// Signals forwarded to its process group, in order (names).
    pub forwarded_signals: Vec<String>,
    /// What the supervisor captured of the agent's stdout and stderr.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output: Vec<OutputRecord>,
}

/// The feedback a `run` request appended to the prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedbackRecord {
    /// Its length in bytes.
    pub bytes: usize,
    /// Lowercase hex SHA-256 of its bytes.
    pub sha256: String,
    /// Bytes of its start left out so that the prompt still fits in one argument.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cut_bytes: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The prompt as the record shows it when the argv does not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptRecord {
    /// Its index in `agent.argv`.
    pub index: usize,
    /// Its length in bytes.
    pub bytes: usize,
    /// Lowercase hex SHA-256 of its bytes.
    pub sha256: String,
}

/// One captured output stream of the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputRecord {
    /// `stdout`, `stderr`, or `both` (one file for both).
    pub stream: String,
    /// Bytes kept in the record file.
    pub kept: u64,
    /// Bytes received past the 1 GiB cap (or after the record file failed), not kept.
    #[serde(default)]
    pub dropped: u64,
    /// The stream reached its end: every process that could write it was gone.
    pub complete: bool,
    /// Why writing the record file stopped, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_error: Option<String>,
}

/// Tokens and cost of one iteration, summed from the runtime's own JSON stream
/// ([`crate::usage`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageRecord {
    /// Input tokens not read from or written to the prompt cache.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to the prompt cache.
    pub cache_write_tokens: u64,
    /// The cost in US dollars the runtime computed from its price list; `None` (`null`) when
    /// it did not say.
    pub cost_usd: Option<f64>,
    /// Which stream it was read from.
    pub source: UsageSource,
}

/// The stream a [`UsageRecord`] was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UsageSource {
    /// pi `--mode json`: its assistant messages' `usage`.
    PiJson,
    /// Claude Code `--output-format stream-json`: its `result` event (or, without one, its
    /// assistant messages).
    ClaudeStreamJson,
    /// Codex `exec --json`: its `turn.completed` events' `usage`.
    CodexJson,
    /// OpenCode `run --format json`: its `step_finish` events' `tokens` and `cost`.
    OpencodeJson,
}

impl IterationResult {
    /// A record with nothing done yet and exit code 125 ("internal: iteration did not finish"),
    /// to be filled in step by step.
    pub fn new(iteration: u32, supervisor: SupervisorInfo) -> IterationResult {
        IterationResult {
            version: RESULT_VERSION,
            iteration,
            exit_code: exit_code::SUPERVISOR_FAILED,
            meaning: exit_code::meaning(exit_code::SUPERVISOR_FAILED),
            signal: None,
            reason: Some("internal: iteration did not finish".to_string()),
            supervisor,
            steps: StepTimes::default(),
            reaped: ReapCounts::default(),
            config_reset: None,
            feedback: None,
            home_reset: None,
            tmp_reset: None,
            output_reset: None,
            ipc_sweep: None,
            supervisor_restored: None,
            workspace_config: Vec::new(),
            claude_config: None,
            pi_config: None,
            codex_config: None,
            opencode_config: None,
            home_guarded: Vec::new(),
            context_files: None,
            verification: None,
            env: EnvRecord::default(),
            confinement: None,
            agent: None,
            usage: None,
            disk_full: None,
            network: None,
            workspace_stripped: Vec::new(),
            workspace_flagged: Vec::new(),
        }
    }

    /// Sets the exit code, its meaning, and the reason.
    pub fn finish(&mut self, exit_code: i32, reason: Option<String>) {
        self.exit_code = exit_code;
        self.meaning = exit_code::meaning(exit_code);
        self.reason = reason;
    }

    /// Serializes the record as one line of JSON followed by `\n`.
    pub fn to_json_line(&self) -> String {
        // Plain data structs with string keys: serialization cannot fail.
        let mut line = serde_json::to_string(self).unwrap_or_default();
        line.push('\n');
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_modes_name_is_its_name_in_the_record() {
        for mode in [
            SupervisorMode::Pid1,
            SupervisorMode::Degraded,
            SupervisorMode::Unprivileged,
        ] {
            assert_eq!(serde_json::json!(mode), mode.name());
        }
    }

    #[test]
    fn record_round_trips_and_has_the_documented_keys() {
        let mut r = IterationResult::new(
            3,
            SupervisorInfo {
                pid1: false,
                mode: SupervisorMode::Degraded,
                degraded_reason: Some("not pid 1".into()),
            },
        );
        r.finish(143, None);
        r.signal = Some("SIGTERM".into());
        r.confinement = Some(ConfinementRecord {
            uid: 65534,
            gid: 65534,
            groups: vec![],
            no_new_privs: true,
            caps_cleared: true,
            landlock: LandlockRecord {
                abi: 7,
                unavailable: None,
                status: LandlockState::FullyEnforced,
                mode: LandlockMode::BestEffort,
                overlaps: vec![],
                withheld: vec![],
            },
            seccomp: SeccompRecord::default(),
            limits: LimitsRecord::default(),
        });
        let line = r.to_json_line();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["supervisor"]["mode"], "degraded");
        assert_eq!(v["meaning"], "agent killed by SIGTERM");
        assert_eq!(v["confinement"]["landlock"]["status"], "fully-enforced");
        assert_eq!(v["confinement"]["landlock"]["mode"], "best-effort");
        for key in [
            "reap_ms",
            "verify_ms",
            "env_ms",
            "confine_launch_ms",
            "agent_ms",
            "final_reap_ms",
        ] {
            assert!(v["steps"].get(key).is_some(), "{key}");
        }
        let back: IterationResult = serde_json::from_str(&line).unwrap();
        assert_eq!(back, r);
    }
}
