//! Step 4 of an iteration: confine the agent, in the forked child, before exec.
//!
//! Work is split in two halves:
//!
//! - [`ConfinePlan::prepare`] runs in the supervisor (allocation and file access allowed): it
//!   resolves the identity, lists the capabilities the kernel supports (refusing a kernel
//!   capability the `caps` crate cannot name, since it could be neither dropped nor read
//!   back), converts paths to C strings and **builds the Landlock ruleset** (opening every
//!   rule's path; the writable roots without following a symlink in any component, see
//!   [`super::nofollow`]). Doing this here keeps path lookups out of the child and surfaces
//!   errors before anything is forked.
//! - [`ConfinePlan::apply_in_child`] runs between `fork` and `exec`: raw `libc` syscalls plus
//!   the `caps` and `landlock` crates, on data prepared by the parent.
//!
//! # Allocation after fork
//!
//! After `fork` in a *multi-threaded* process only async-signal-safe calls are allowed: another
//! thread may have held a lock (the allocator's among them) at fork time, and the child gets
//! that lock held by a thread that does not exist in it, so the first `malloc` deadlocks.
//! pitcrew-init forks only while it is single-threaded, and checks it:
//! [`launch`](super::launch::launch) counts this process's threads (`/proc/self/status`,
//! `Threads:`) right before `fork` and refuses to launch (125, `internal: …`) unless the count
//! is 1. The only threads it ever starts are the tree-hash workers of the verify step
//! (`std::thread::scope`, every handle joined before verification returns); once the count is 1
//! no other thread exists to start one between the check and the `fork`. With a single thread at
//! fork, the forking thread is the only one that could hold the allocator lock, and it is inside
//! `fork`, not `malloc`, so the child may allocate.
//!
//! The child still prefers the `caps` calls that do not allocate: per-capability
//! `caps::drop` of the bounding set, `caps::clear` of the ambient, effective, permitted and
//! inheritable sets (one `prctl` or `capget`/`capset` each) and per-capability `caps::has_cap`
//! for the read-back, rather than the `HashSet`-returning `read`/`all` or the bounding
//! `clear` (which builds one). So in practice the child allocates only to build a `CapsError`
//! on a failure path, right before it exits 125; `landlock::RulesetCreated::restrict_self`
//! likewise builds error values only on failure.
//!
//! # Order in the child
//!
//! Default signal dispositions; `setsid` (new session: no controlling terminal, so no TIOCSTI
//! injection); join the agent's cgroups (while still root: their `cgroup.procs` are root's,
//! [`super::cgroup`]); join the agent's own network namespace when the iteration has one
//! (`setns`, which needs `CAP_SYS_ADMIN`: before the bounding set and the uid change,
//! [`super::netns::AgentNamespace`]; first the user namespace it was made in when a
//! supervisor without `CAP_SYS_ADMIN` made it through one, [`super::netns_helper`]); dumpable
//! again when the supervisor is not (unprivileged mode), then `oom_score_adj` 1000 (before the
//! uid change makes `/proc/self` root's); drop the capability bounding set while still
//! privileged (or after joining such a user namespace, which made it full); `setgroups`, `setresgid`, `setresuid`; clear the ambient set,
//! then the effective, permitted and inheritable sets; **read back** uid, gid, groups and every
//! capability set (bounding, ambient, effective, permitted, inheritable); `chdir` to the workdir
//! as the agent; mark every fd ≥ 3 close-on-exec; the rlimits (`RLIMIT_CORE` 0,
//! `RLIMIT_NPROC`/`RLIMIT_DATA` for the limits no cgroup enforces, `RLIMIT_FSIZE` for a disk
//! budget);
//! `PR_SET_NO_NEW_PRIVS` (read back); Landlock
//! `restrict_self`; the seccomp filter ([`super::seccomp`], read back); restore the signal mask
//! the supervisor started with. A failing stage is
//! reported by name and errno.

use super::cgroup::{limit_record, AgentCgroups, Controller, IterationCgroups};
use super::child_status::{ChildFailure, ChildReport, Stage};
use super::landlock::build_ruleset;
pub use super::landlock::{kernel_landlock_abi, LandlockAvailability, LANDLOCK_ABI};
use crate::manifest::{LandlockMode, Manifest, RuntimeDirPaths};
use crate::result::{
    ConfinementRecord, Enforcement, LandlockRecord, LandlockState, LimitsRecord, SeccompRecord,
    SupervisorMode,
};
use caps::{CapSet, Capability};
use landlock::{RulesetCreated, RulesetStatus};
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::Path;

/// Everything the child needs, prepared by the parent.
#[derive(Debug)]
pub struct ConfinePlan {
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: Vec<libc::gid_t>,
    groups_readback: Vec<libc::gid_t>,
    change_identity: bool,
    privileged: bool,
    /// The supervisor made itself non-dumpable (unprivileged mode): the child, which shares
    /// its uid, becomes dumpable again so it can set up `/proc/self` (exec would anyway).
    restore_dumpable: bool,
    /// Every capability the kernel supports, in index order.
    caps: Vec<Capability>,
    /// Whether the kernel has an ambient set (Linux 4.3).
    ambient_supported: bool,
    fd_limit: i32,
    workdir: CString,
    landlock: Option<RulesetCreated>,
    landlock_required: bool,
    seccomp: Option<super::seccomp::Filter>,
    /// The `cgroup.procs` of the agent's cgroups, joined by writing `0`.
    cgroup_procs: Vec<libc::c_int>,
    /// `RLIMIT_NPROC` of the agent, where no pids cgroup counts its processes.
    processes: Option<libc::rlim_t>,
    /// `RLIMIT_DATA` of the agent, where no memory cgroup bounds its tree.
    data: Option<libc::rlim_t>,
    /// `RLIMIT_FSIZE` of the agent: `limits.disk_bytes`, when set ([`super::disk_budget`]).
    file_size: Option<libc::rlim_t>,
    /// The agent's own network namespace, joined before the privileges go
    /// ([`ConfinePlan::join_network`]).
    netns: Option<OwnedFd>,
    /// The user namespace the agent's network namespace was made in, when not the sandbox's
    /// (a supervisor without `CAP_SYS_ADMIN`, [`super::netns_helper`]): joined first.
    userns: Option<OwnedFd>,
    /// `/run` hidden in the agent's own mount namespace ([`ConfinePlan::hide_run`]).
    private_run: Option<super::private_run::AgentRun>,
    original_mask: libc::sigset_t,
    /// The record, with the parent's part filled in (identity, Landlock ABI, mode, paths).
    pub record: ConfinementRecord,
}

fn rlim(value: u64) -> libc::rlim_t {
    libc::rlim_t::try_from(value).unwrap_or(libc::RLIM_INFINITY)
}

/// Whether `path` is `root` or lies below it.
fn is_under(path: &str, root: &str) -> bool {
    let root = root.trim_end_matches('/');
    root.is_empty() || path == root || path.strip_prefix(root).is_some_and(|r| r.starts_with('/'))
}

/// The capabilities the running kernel supports, in index order, each named by the `caps`
/// crate. Fails when the kernel supports a capability beyond the last one the crate knows: the
/// child could neither drop it from the bounding set nor see it when reading the sets back.
pub fn kernel_capabilities() -> Result<Vec<Capability>, String> {
    // Supported = `PR_CAPBSET_READ` accepts the index (it fails with EINVAL otherwise).
    let mut supported: Vec<Capability> =
        caps::runtime::thread_all_supported().into_iter().collect();
    supported.sort_unstable_by_key(Capability::index);
    let beyond = caps::all()
        .iter()
        .map(Capability::index)
        .max()
        .map_or(0, |last| u32::from(last) + 1);
    // SAFETY: PR_CAPBSET_READ takes a capability number and touches no memory.
    let known_to_kernel =
        unsafe { libc::prctl(libc::PR_CAPBSET_READ, libc::c_ulong::from(beyond), 0, 0, 0) } >= 0;
    if known_to_kernel {
        return Err(format!(
            "confine: capabilities: the kernel supports capability {beyond}, which the caps crate \
             cannot name (it knows 0..={}); refusing rather than leave it in the bounding set",
            beyond - 1
        ));
    }
    Ok(supported)
}

/// The paths the agent may write: workdir, the runtime dirs the manifest sets (home, tmp,
/// config, sessions) and `confinement.read_write`. There is no implicit `/tmp`: a shared `/tmp`
/// would make anything below it writable, and Landlock cannot subtract a verified tree again.
///
/// Each must be an existing directory reached without a symlink in any component: several
/// lie in directories the agent owns (`<config>/sessions`), where it could otherwise plant
/// `sessions -> /` and be granted `/` at the next launch. [`ConfinePlan::prepare`] refuses the
/// launch (125, `confine: writable root …`) when one is not.
pub fn writable_roots(manifest: &Manifest, dirs: &RuntimeDirPaths) -> Vec<String> {
    let mut roots = vec![manifest.workdir.clone()];
    roots.extend(dirs.agent_dirs().into_iter().map(String::from));
    roots.extend(manifest.confinement.read_write.iter().cloned());
    roots
}

/// The verified paths (trees and pinned files) of `manifest` that lie under one of `writable`,
/// each as `PATH (under ROOT)`.
fn verified_under(manifest: &Manifest, writable: &[String]) -> Vec<String> {
    manifest
        .trees
        .iter()
        .map(|t| t.path.as_str())
        .chain(manifest.files.iter().map(|f| f.path.as_str()))
        .filter_map(|p| {
            writable
                .iter()
                .find(|w| is_under(p, w))
                .map(|w| format!("{p} (under {w})"))
        })
        .collect()
}

/// How a launch uses Landlock: the mode, and the writable roots it withholds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LandlockPlan {
    /// The mode the launch runs with.
    pub mode: LandlockMode,
    /// Writable roots left read-only because they hold a verified path (unprivileged mode).
    pub withheld: Vec<String>,
}

/// How a launch uses Landlock: the manifest's mode, except in the unprivileged mode. There the
/// agent's uid owns the verified trees and the supervisor's own files (`own`: the records
/// directory), so during an iteration only Landlock keeps the agent from them: best effort
/// becomes `required`; `off`, a verified path in the workdir, and a writable root that overlaps
/// one of `own` are refused (with the reason); any other writable root that holds a verified
/// path (pi's config directory with its pinned `models.json`) is withheld: it stays read-only,
/// its own writable subdirectories (`sessions`) stay writable. A required Landlock the kernel
/// (or a seccomp filter around the supervisor) does not offer is refused here too.
pub fn landlock_plan(
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
    mode: SupervisorMode,
    own: &[std::path::PathBuf],
) -> Result<LandlockPlan, String> {
    let asked = manifest.confinement.landlock;
    // Said before anything is forked, with the kernel's (or the filter's) reason.
    let required = |why: &str, withheld: Vec<String>| {
        let pinned = LANDLOCK_ABI as u32;
        match LandlockAvailability::probe() {
            LandlockAvailability::Unavailable(missing) => Err(format!(
                "confine: Landlock is required ({why}) but unavailable: {missing}"
            )),
            LandlockAvailability::Available(abi) if abi < pinned => Err(format!(
                "confine: Landlock is required ({why}) but this kernel offers ABI {abi}, below \
                 the {pinned} whose rights and scopes pitcrew enforces (Linux 6.12)"
            )),
            LandlockAvailability::Available(_) => Ok(LandlockPlan {
                mode: LandlockMode::Required,
                withheld,
            }),
        }
    };
    if mode != SupervisorMode::Unprivileged {
        return match asked {
            LandlockMode::Required => required("confinement.landlock: required", Vec::new()),
            other => Ok(LandlockPlan {
                mode: other,
                withheld: Vec::new(),
            }),
        };
    }
    const WHY: &str = "in the unprivileged mode the agent's uid owns them, and only Landlock \
                       keeps them read-only";
    if asked == LandlockMode::Off {
        return Err(format!(
            "confine: confinement.landlock: off is refused: the verified trees and the records \
             would be writable by the agent ({WHY})"
        ));
    }
    let writable = writable_roots(manifest, dirs);
    if let Some(overlap) = verified_under(manifest, std::slice::from_ref(&manifest.workdir)).first()
    {
        return Err(format!(
            "confine: verified path {overlap} would be writable by the agent ({WHY}); move it \
             out of the workdir"
        ));
    }
    for own in own {
        let own = own.to_string_lossy();
        if let Some(root) = writable
            .iter()
            .find(|w| is_under(&own, w) || is_under(w, &own))
        {
            return Err(format!(
                "confine: the supervisor's {own} and the agent's writable {root} overlap ({WHY}); \
                 keep the records outside the agent's directories"
            ));
        }
    }
    let withheld = writable
        .iter()
        .filter(|w| !verified_under(manifest, std::slice::from_ref(w)).is_empty())
        .cloned()
        .collect();
    required("the unprivileged mode", withheld)
}

impl ConfinePlan {
    /// Prepares confinement for `manifest` with Landlock as `plan` says ([`landlock_plan`]) (the
    /// parent's half). `original_mask` is restored in
    /// the child right before exec; the child joins `cgroups` (made from `agent_cgroups`), and
    /// the limits they do not enforce become rlimits.
    pub fn prepare(
        manifest: &Manifest,
        dirs: &RuntimeDirPaths,
        plan: &LandlockPlan,
        original_mask: libc::sigset_t,
        agent_cgroups: &AgentCgroups,
        cgroups: &IterationCgroups,
    ) -> Result<ConfinePlan, String> {
        let user = &manifest.user;
        let groups: Vec<libc::gid_t> = user.groups.clone();
        let euid = nix::unistd::geteuid().as_raw();
        let privileged = euid == 0;
        let change_identity = privileged
            || nix::unistd::getuid().as_raw() != user.uid
            || nix::unistd::getgid().as_raw() != user.gid;
        // Ids this user namespace does not map were refused by the spine before anything was
        // made for the agent (`iteration::prepare`).
        let caps = kernel_capabilities()?;
        let ambient_supported = caps::runtime::ambient_set_supported().is_ok();
        let fd_limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map(|(soft, _)| soft.min(65_536))
            .unwrap_or(4096);
        let workdir = CString::new(manifest.workdir.as_str())
            .map_err(|_| "confine: workdir contains NUL".to_string())?;

        let mode = plan.mode;
        let writable: Vec<String> = writable_roots(manifest, dirs)
            .into_iter()
            .filter(|w| !plan.withheld.contains(w))
            .collect();
        let overlaps = verified_under(manifest, &writable);
        for overlap in &overlaps {
            tracing::warn!("confine: verified path {overlap} is agent-writable under Landlock");
        }

        let availability = LandlockAvailability::probe();
        let landlock = if mode == LandlockMode::Off {
            None
        } else {
            // Fail closed: a root that cannot be opened without following a link gets no
            // rule of its own, and the launch is refused rather than run with less (or, through
            // the link, more) than the manifest says.
            let roots = writable
                .iter()
                .map(|path| {
                    super::nofollow::open_dir(Path::new(path)).map_err(|why| {
                        format!(
                            "confine: writable root {path}: {why} (writable roots must be \
                             existing directories, reached without following a symlink)"
                        )
                    })
                })
                .collect::<Result<Vec<OwnedFd>, String>>()?;
            Some(build_ruleset(roots).map_err(|e| format!("confine: landlock ruleset: {e}"))?)
        };

        let disk_budget = manifest.limits.disk_bytes.is_some();
        let (seccomp, seccomp_record) = match super::seccomp::Filter::build(disk_budget) {
            Ok(filter) => (
                Some(filter),
                SeccompRecord {
                    installed: false,
                    unavailable: None,
                    denied_syscalls: super::seccomp::DENIED_SYSCALLS.map(String::from).to_vec(),
                    self_only_syscalls: super::seccomp::SELF_ONLY_SYSCALLS
                        .map(String::from)
                        .to_vec(),
                    denied_signals: super::seccomp::DENIED_SIGNALS.map(String::from).to_vec(),
                    denied_fcntl: super::seccomp::DENIED_FCNTL.map(String::from).to_vec(),
                    unsupported_syscalls: super::seccomp::UNSUPPORTED_SYSCALLS
                        .iter()
                        .chain(if disk_budget {
                            &super::seccomp::UNSUPPORTED_WITH_DISK_BUDGET[..]
                        } else {
                            &[]
                        })
                        .map(|s| s.to_string())
                        .collect(),
                    absent_syscalls: super::seccomp::ABSENT_SYSCALLS.map(String::from).to_vec(),
                    socket_families: super::seccomp::SOCKET_FAMILIES
                        .map(|(name, _)| name.to_string())
                        .to_vec(),
                },
            ),
            Err(why) => {
                tracing::warn!("confine: {why}; the agent runs without it");
                (
                    None,
                    SeccompRecord {
                        unavailable: Some(why),
                        ..SeccompRecord::default()
                    },
                )
            }
        };

        Ok(ConfinePlan {
            uid: user.uid,
            gid: user.gid,
            groups_readback: vec![0; groups.len() + 1],
            groups,
            change_identity,
            privileged,
            // SAFETY: PR_GET_DUMPABLE takes no pointer.
            restore_dumpable: unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) } == 0,
            caps,
            ambient_supported,
            fd_limit: i32::try_from(fd_limit).unwrap_or(65_536),
            workdir,
            landlock,
            landlock_required: mode == LandlockMode::Required,
            seccomp,
            cgroup_procs: cgroups.procs_fds(),
            processes: cgroups
                .dir(Controller::Pids)
                .is_none()
                .then(|| rlim(manifest.limits.processes)),
            data: cgroups
                .dir(Controller::Memory)
                .is_none()
                .then(|| rlim(manifest.limits.memory_bytes)),
            file_size: manifest.limits.disk_bytes.map(rlim),
            netns: None,
            userns: None,
            private_run: None,
            original_mask,
            record: ConfinementRecord {
                uid: user.uid,
                gid: user.gid,
                groups: user.groups.clone(),
                no_new_privs: false,
                caps_cleared: false,
                landlock: LandlockRecord {
                    abi: availability.abi(),
                    unavailable: availability.unavailable().map(String::from),
                    status: if mode == LandlockMode::Off {
                        LandlockState::Off
                    } else {
                        LandlockState::NotEnforced
                    },
                    mode,
                    overlaps,
                    withheld: plan.withheld.clone(),
                },
                seccomp: seccomp_record,
                limits: LimitsRecord {
                    processes: limit_record(
                        manifest.limits.processes,
                        Controller::Pids,
                        Enforcement::RlimitNproc,
                        agent_cgroups,
                        cgroups,
                    ),
                    memory: limit_record(
                        manifest.limits.memory_bytes,
                        Controller::Memory,
                        Enforcement::RlimitData,
                        agent_cgroups,
                        cgroups,
                    ),
                    core: 0,
                    disk: None,
                },
            },
        })
    }

    /// Makes the agent join its own network namespace ([`super::netns::AgentNamespace`]) in
    /// the child, before it gives up its privileges: the user namespace it was made in first,
    /// when it has one (where the agent's ids, and only those, are mapped: a non-root
    /// supervisor's own, or the manifest's user's for a root one).
    pub fn join_network(&mut self, ns: super::netns::AgentNamespace) {
        let (net, user) = ns.into_fds();
        self.netns = Some(net);
        self.userns = user;
    }

    /// Makes the agent's child hide `/run` in a mount namespace of its own, after it joined
    /// its network namespace ([`super::private_run::AgentRun`]).
    pub fn hide_run(&mut self, run: super::private_run::AgentRun) {
        self.private_run = Some(run);
    }

    /// The child's half: applies everything, in the order of the module doc.
    ///
    /// # Safety
    ///
    /// Call only in a freshly forked child of the supervisor, before exec, and only when the
    /// supervisor was single-threaded at `fork` (checked by [`launch`](super::launch::launch);
    /// see "Allocation after fork" in the module doc). It changes process credentials, the
    /// session, the signal state and the fd table of the calling process.
    pub unsafe fn apply_in_child(&mut self) -> Result<ChildReport, ChildFailure> {
        // errno as the failing call left it (the `caps` crate reads it before it formats its
        // error message).
        let fail = |stage: Stage| ChildFailure {
            stage,
            errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        };
        // SAFETY: the caller guarantees we are the forked child before exec. Raw syscalls on
        // a zeroed stack `sigaction`; `setsid` takes no arguments.
        unsafe {
            // Default dispositions: handled and ignored signals (Rust ignores SIGPIPE before
            // main; we ignore TTIN/TTOU) must not leak into the agent.
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            for sig in 1..=libc::SIGRTMAX() {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                    // EINVAL for the few numbers libc reserves: nothing to reset there.
                    libc::sigaction(sig, &dfl, std::ptr::null_mut());
                }
            }
            if libc::setsid() < 0 {
                return Err(fail(Stage::Setsid));
            }
        }

        // Into the agent's cgroups while still root (their files are root's); every process
        // the agent starts is born there.
        for &fd in &self.cgroup_procs {
            // SAFETY: write of a 1-byte static buffer to an fd the parent opened for us.
            if unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } != 1 {
                return Err(fail(Stage::Cgroup));
            }
        }

        // Into the user namespace the agent's network namespace was made in: the child, in the
        // parent namespace with the owner's euid, holds CAP_SYS_ADMIN there, and gains every
        // capability in it (cleared below; its exec as a non-zero uid there, with no ambient
        // capabilities and no_new_privs, leaves it none).
        if let Some(fd) = &self.userns {
            use std::os::fd::AsRawFd;
            // SAFETY: setns takes an fd the plan owns (open until exec, close-on-exec) and a flag;
            // this child is single-threaded and shares no filesystem information.
            if unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWUSER) } != 0 {
                return Err(fail(Stage::Userns));
            }
        }
        // Into the agent's own network namespace while CAP_SYS_ADMIN is still held (over the
        // sandbox's user namespace, or the one just joined).
        if let Some(fd) = &self.netns {
            use std::os::fd::AsRawFd;
            // SAFETY: setns takes an fd the plan owns (open until exec, close-on-exec) and a flag.
            if unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(fail(Stage::Netns));
            }
        }
        // The host's sockets under /run out of its reach, where the sandbox did not hide them.
        if let Some(run) = &self.private_run {
            // SAFETY: the forked child before exec, still holding CAP_SYS_ADMIN.
            if let Err(errno) = unsafe { run.apply_in_child() } {
                return Err(ChildFailure {
                    stage: Stage::PrivateRun,
                    errno,
                });
            }
        }

        // SAFETY: prctl with integer arguments only.
        if self.restore_dumpable && unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) } != 0 {
            return Err(fail(Stage::Dumpable));
        }

        // The OOM killer's first choice is the agent's tree, never the supervisor: where the
        // agent's memory is bounded only by its container (or the machine), an agent that
        // fills it must not get PID 1 killed and its record lost. Raising one's own score
        // needs no privilege; it must happen before the uid change, which makes `/proc/self`
        // root's. Inherited by every process the agent starts.
        // SAFETY: open/write/close of a static NUL-terminated path and a static buffer.
        unsafe {
            let fd = libc::open(
                c"/proc/self/oom_score_adj".as_ptr(),
                libc::O_WRONLY | libc::O_CLOEXEC,
            );
            if fd < 0 {
                return Err(fail(Stage::OomScore));
            }
            let written = libc::write(fd, b"1000".as_ptr().cast(), 4);
            libc::close(fd);
            if written != 4 {
                return Err(fail(Stage::OomScore));
            }
        }

        // The bounding set can only be lowered with CAP_SETPCAP: before the uid change.
        // `self.caps` holds only capabilities the kernel supports, so no EINVAL to tolerate.
        // Joining a user namespace made the bounding set full there (and gave CAP_SETPCAP in
        // it): emptied too, though no_new_privs already keeps exec from raising anything.
        if self.privileged || self.userns.is_some() {
            for &cap in &self.caps {
                if caps::drop(None, CapSet::Bounding, cap).is_err() {
                    return Err(fail(Stage::Bounding));
                }
            }
        }

        if self.change_identity {
            // SAFETY: `groups` is a live Vec whose length is passed with its pointer; the id
            // calls take plain integers.
            unsafe {
                if libc::setgroups(self.groups.len(), self.groups.as_ptr()) != 0 {
                    return Err(fail(Stage::Groups));
                }
                if libc::setresgid(self.gid, self.gid, self.gid) != 0 {
                    return Err(fail(Stage::Gid));
                }
                if libc::setresuid(self.uid, self.uid, self.uid) != 0 {
                    return Err(fail(Stage::Uid));
                }
            }
        }

        if self.ambient_supported && caps::clear(None, CapSet::Ambient).is_err() {
            return Err(fail(Stage::Ambient));
        }
        // Clearing the permitted set clears the effective set with it; lowering any of the
        // three needs no privilege, so this works after the uid change too.
        for set in [CapSet::Effective, CapSet::Permitted, CapSet::Inheritable] {
            if caps::clear(None, set).is_err() {
                return Err(fail(Stage::Capset));
            }
        }

        // SAFETY: getresuid/getresgid write three ids into stack variables; getgroups writes
        // at most `groups_readback.len()` ids into that Vec, whose length is what we pass.
        unsafe {
            let (mut r, mut e, mut s) = (0, 0, 0);
            if libc::getresuid(&mut r, &mut e, &mut s) != 0 || [r, e, s] != [self.uid; 3] {
                return Err(fail(Stage::IdsReadback));
            }
            if libc::getresgid(&mut r, &mut e, &mut s) != 0 || [r, e, s] != [self.gid; 3] {
                return Err(fail(Stage::IdsReadback));
            }
            if self.change_identity {
                let n = libc::getgroups(
                    i32::try_from(self.groups_readback.len()).unwrap_or(i32::MAX),
                    self.groups_readback.as_mut_ptr(),
                );
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                if n != self.groups.len()
                    || !self.groups_readback[..n]
                        .iter()
                        .all(|g| self.groups.contains(g))
                {
                    return Err(fail(Stage::IdsReadback));
                }
            }
        }

        let caps_cleared = self.read_back_capabilities()?;

        // SAFETY: `workdir` is a NUL-terminated C string owned by `self`; close_range and fcntl
        // take fd numbers and flags only.
        unsafe {
            if libc::chdir(self.workdir.as_ptr()) != 0 {
                return Err(fail(Stage::Chdir));
            }

            // Every fd >= 3 close-on-exec (the status pipe and the Landlock ruleset must stay
            // open until exec, so CLOEXEC rather than close).
            const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
            if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) != 0 {
                // Kernels before 5.11: mark each fd up to the soft limit.
                for fd in 3..self.fd_limit {
                    let flags = libc::fcntl(fd, libc::F_GETFD);
                    if flags >= 0 && libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) != 0 {
                        return Err(fail(Stage::CloseFds));
                    }
                }
            }
        }

        // After the uid change, so the process limit counts the agent's uid; no core files (they
        // would land in the workspace with whatever the process held in memory).
        for (resource, value) in [
            (libc::RLIMIT_NPROC, self.processes),
            (libc::RLIMIT_DATA, self.data),
            (libc::RLIMIT_FSIZE, self.file_size),
            (libc::RLIMIT_CORE, Some(0)),
        ] {
            let Some(value) = value else { continue };
            let limit = libc::rlimit {
                rlim_cur: value,
                rlim_max: value,
            };
            // SAFETY: setrlimit reads a stack struct; lowering limits needs no privilege.
            if unsafe { libc::setrlimit(resource, &limit) } != 0 {
                return Err(fail(Stage::Rlimits));
            }
        }

        // SAFETY: prctl with integer arguments only.
        let no_new_privs = unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(fail(Stage::NoNewPrivs));
            }
            libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1
        };
        if !no_new_privs {
            return Err(fail(Stage::NoNewPrivs));
        }

        let landlock = match self.landlock.take() {
            None => LandlockState::Off,
            Some(ruleset) => match ruleset.restrict_self() {
                Ok(status) => match status.ruleset {
                    RulesetStatus::FullyEnforced => LandlockState::FullyEnforced,
                    RulesetStatus::PartiallyEnforced => LandlockState::PartiallyEnforced,
                    RulesetStatus::NotEnforced => LandlockState::NotEnforced,
                },
                Err(_) => return Err(fail(Stage::Landlock)),
            },
        };
        if self.landlock_required && landlock != LandlockState::FullyEnforced {
            return Err(ChildFailure {
                stage: Stage::LandlockRequired,
                errno: 0,
            });
        }

        // Last, so nothing of the setup above depends on what it refuses.
        let seccomp = match &self.seccomp {
            None => false,
            // SAFETY: no_new_privs is set (checked above); `install` only calls prctl.
            Some(filter) => match unsafe { filter.install() } {
                Ok(()) => true,
                Err(errno) => {
                    return Err(ChildFailure {
                        stage: Stage::Seccomp,
                        errno,
                    })
                }
            },
        };

        // SAFETY: `original_mask` is a sigset_t owned by `self`; the old mask is not wanted.
        if unsafe {
            libc::sigprocmask(libc::SIG_SETMASK, &self.original_mask, std::ptr::null_mut())
        } != 0
        {
            return Err(fail(Stage::SignalMask));
        }

        Ok(ChildReport {
            landlock,
            no_new_privs,
            caps_cleared,
            seccomp,
        })
    }

    /// Reads every capability set back, one capability at a time (`has_cap`: one `capget` or
    /// `prctl` each, no allocation). Effective, permitted, inheritable and ambient must be empty
    /// (else `caps-readback` with EPERM; a failing read fails too, with its errno). Returns
    /// whether the bounding set is empty too: it stays full when the supervisor was not
    /// privileged, which the record reports as `caps_cleared: false`.
    fn read_back_capabilities(&self) -> Result<bool, ChildFailure> {
        let read = |set: CapSet, cap: Capability| {
            caps::has_cap(None, set, cap).map_err(|_| ChildFailure {
                stage: Stage::CapsReadback,
                errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
            })
        };
        let mut bounding_empty = true;
        for &cap in &self.caps {
            for set in [CapSet::Effective, CapSet::Permitted, CapSet::Inheritable] {
                if read(set, cap)? {
                    return Err(ChildFailure {
                        stage: Stage::CapsReadback,
                        errno: libc::EPERM,
                    });
                }
            }
            if self.ambient_supported && read(CapSet::Ambient, cap)? {
                return Err(ChildFailure {
                    stage: Stage::CapsReadback,
                    errno: libc::EPERM,
                });
            }
            if read(CapSet::Bounding, cap)? {
                bounding_empty = false;
            }
        }
        Ok(bounding_empty)
    }
}

#[cfg(test)]
mod tests;
