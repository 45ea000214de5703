//! The supervisor's long-lived state, created once at start and handed to every iteration:
//! the signalfd, the reaper, the baseline environment and whether we are PID 1.

use super::cgroup::{AgentCgroups, CgroupMode};
use super::reaper::Reaper;
use super::signals::Signals;
use crate::result::{SupervisorInfo, SupervisorMode};

/// The environment the image gave the supervisor, captured once before anything else runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BaselineEnv {
    /// UTF-8 variables, in the order the process received them.
    pub vars: Vec<(String, String)>,
    /// Names (lossy) of variables skipped because the name or value is not UTF-8.
    pub non_utf8: Vec<String>,
}

impl BaselineEnv {
    /// Captures the process environment. Call first thing in `main`.
    pub fn capture() -> BaselineEnv {
        let mut env = BaselineEnv::default();
        for (name, value) in std::env::vars_os() {
            match (name.into_string(), value.into_string()) {
                (Ok(name), Ok(value)) => env.vars.push((name, value)),
                (Ok(name), Err(_)) => env.non_utf8.push(name),
                (Err(name), _) => env.non_utf8.push(name.to_string_lossy().into_owned()),
            }
        }
        env
    }

    /// The baseline `PATH`, or the Debian default when the image sets none.
    pub fn path(&self) -> &str {
        self.vars
            .iter()
            .find(|(k, _)| k == "PATH")
            .map_or(crate::environment::DEFAULT_PATH, |(_, v)| v)
    }
}

/// State shared by all iterations of one supervisor process.
#[derive(Debug)]
pub struct Supervisor {
    /// The signalfd (every asynchronous signal is blocked).
    pub signals: Signals,
    /// The only waiter for children.
    pub reaper: Reaper,
    /// The environment captured at start.
    pub baseline: BaselineEnv,
    /// PID 1 or degraded, and why.
    pub info: SupervisorInfo,
    /// Whether `/proc` shows this process's PID namespace (`/proc/self` is our pid).
    pub proc_is_ours: bool,
    /// Our pid.
    pub pid: i32,
    /// Processes the reap must spare: the root-owned `pitcrew-init attach` bridges of connected
    /// hosts (pids from `SO_PEERCRED`). The agent uid can never reach the control socket, so
    /// nothing the agent started is ever listed here.
    pub spared: Vec<i32>,
    /// What happens to the IPC namespace and `/dev/shm` after every first reap.
    pub ipc_reset: super::private_ipc::IpcReset,
    /// The host directories hidden from the agent by an empty tmpfs (`serve --private-run`):
    /// named in every record's `network`.
    pub hidden_run: Vec<String>,
    /// Where each iteration's agent tree gets its own cgroup, if anywhere.
    pub agent_cgroups: AgentCgroups,
    /// The supervisor's own files the agent must never write (the records directory). In the
    /// unprivileged mode the agent's uid owns them, and a launch whose writable directories
    /// overlap one is refused ([`super::confine::landlock_plan`]).
    pub supervisor_paths: Vec<std::path::PathBuf>,
    /// The resource limits the supervisor started with, set back after every reap.
    pub own_limits: super::own_limits::OwnLimits,
    /// In the unprivileged mode, the directories of its uid on its paths (held by descriptor,
    /// their modes given back after every reap and before uploads and collects).
    pub owned_dirs: super::owned_dirs::OwnedDirs,
}

impl Supervisor {
    /// Sets up process-wide state (the agent's cgroups are looked for as `cgroups` says): as PID 1, `chdir("/")` (so the supervisor pins no
    /// mount); otherwise becomes a child subreaper so the agent's orphans stay ours, and says
    /// so in [`Supervisor::info`].
    pub fn start(baseline: BaselineEnv, signals: Signals, cgroups: CgroupMode) -> Supervisor {
        let pid = nix::unistd::getpid().as_raw();
        let proc_is_ours = std::fs::read_link("/proc/self")
            .map(|p| p.as_os_str() == pid.to_string().as_str())
            .unwrap_or(false);
        if !proc_is_ours {
            tracing::warn!(
                "supervisor: /proc does not show our PID namespace; reaping relies on ECHILD only"
            );
        }
        let info = if pid == 1 {
            if let Err(err) = nix::unistd::chdir("/") {
                tracing::warn!("supervisor: chdir(\"/\") failed: {err}");
            }
            SupervisorInfo {
                pid1: true,
                mode: SupervisorMode::Pid1,
                degraded_reason: None,
            }
        } else {
            let mut reason = format!(
                "not PID 1 of a PID namespace (pid {pid}): child subreaper, descendants found through /proc"
            );
            // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer flag and touches no memory.
            if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
                let err = std::io::Error::last_os_error();
                reason.push_str(&format!("; PR_SET_CHILD_SUBREAPER failed: {err}"));
            }
            tracing::warn!("supervisor: degraded mode: {reason}");
            SupervisorInfo {
                pid1: false,
                mode: SupervisorMode::Degraded,
                degraded_reason: Some(reason),
            }
        };
        Supervisor {
            signals,
            reaper: Reaper::new(),
            baseline,
            info,
            proc_is_ours,
            pid,
            spared: Vec::new(),
            ipc_reset: super::private_ipc::IpcReset::None,
            hidden_run: Vec::new(),
            agent_cgroups: AgentCgroups::discover(cgroups),
            supervisor_paths: Vec::new(),
            own_limits: super::own_limits::OwnLimits::capture(),
            owned_dirs: super::owned_dirs::OwnedDirs::off(),
        }
    }
}

impl Supervisor {
    /// Sets back what any process of the supervisor's uid could have changed of its own state:
    /// its resource limits ([`super::own_limits`]) and the modes of the directories it holds
    /// ([`super::owned_dirs`]). Called after every reap, and before uploads and collects.
    pub fn restore_own_state(&self) -> Option<crate::result::SupervisorRestored> {
        let limits = self.own_limits.restore();
        let modes = self.owned_dirs.restore();
        let restored = crate::result::SupervisorRestored {
            limits: limits.restored,
            limits_lowered: limits.lowered,
            modes: modes.modes,
            modes_failed: modes.failed,
        };
        (restored != crate::result::SupervisorRestored::default()).then_some(restored)
    }

    /// Takes the unprivileged mode (`--unprivileged`): under someone else's init, as the
    /// sandbox's own non-root user, the reap takes every process of this uid but the
    /// supervisor's ancestors, whoever its parent is ([`super::reap`]). Refused as PID 1 (that
    /// mode reaps everything already) and as root (it would take every root process in sight).
    pub fn enter_unprivileged(&mut self) -> Result<(), String> {
        if self.info.pid1 {
            return Err("--unprivileged: this supervisor is PID 1 of its PID namespace, whose reap takes every process already".into());
        }
        let uid = nix::unistd::geteuid();
        if uid.is_root() {
            return Err("--unprivileged as root would reap every root process in sight but its own ancestors; run it as the sandbox's user".into());
        }
        // The agent shares our uid: without this it could read our memory and descriptors
        // through /proc/<pid> (Landlock refuses that too, from outside its domain).
        // SAFETY: PR_SET_DUMPABLE takes an integer flag and touches no memory.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            return Err(format!(
                "--unprivileged: PR_SET_DUMPABLE: {}",
                std::io::Error::last_os_error()
            ));
        }
        self.info.mode = SupervisorMode::Unprivileged;
        let gid = nix::unistd::getgid();
        let root_group = if gid.as_raw() == 0 {
            "; the group is root (gid 0, as `--user UID` without a group gives): what group root may write, the agent may write"
        } else {
            ""
        };
        self.info.degraded_reason = Some(format!(
            "unprivileged (uid {uid}, gid {gid}, pid {}): every process of this uid but the supervisor's ancestors is reaped, found through /proc; processes of other uids are out of reach; the agent runs as this uid and owns the uploaded trees and the records, so only Landlock (required in this mode) keeps them read-only during an iteration{root_group}",
            self.pid
        ));
        if gid.as_raw() == 0 {
            tracing::warn!("supervisor: unprivileged with group root (gid 0)");
        }
        // What the agent's uid left in /dev/shm, /dev/mqueue and System V IPC goes with it.
        self.ipc_reset = super::private_ipc::IpcReset::Sweep;
        // It owns the directories on our paths too, and may `chmod` them.
        self.owned_dirs = super::owned_dirs::OwnedDirs::of_uid(uid.as_raw());
        tracing::warn!("supervisor: unprivileged mode: uid {uid}");
        Ok(())
    }
}
