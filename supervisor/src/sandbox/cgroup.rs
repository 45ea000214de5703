//! The agent's own cgroup: memory and process count bounded for its whole tree.
//!
//! Where the supervisor's cgroup is writable (root on a host with the cgroup v1 `memory` and
//! `pids` hierarchies, as the local engine runs it; a privileged container), every iteration
//! gets a fresh child cgroup in each of those hierarchies, named
//! `pitcrew-<pid namespace inode>-<pid>-<iteration>` under the supervisor's own:
//! `memory.limit_in_bytes` is `limits.memory_bytes`, and so are `memory.memsw.limit_in_bytes` (swap
//! is no way around it) and `memory.kmem.tcp.limit_in_bytes` (TCP buffers are counted only with
//! it; UDP buffers a cgroup v1 does not count at all),
//! `pids.max` is `limits.processes`. The forked child joins them (writing `0` to the
//! `cgroup.procs` descriptors opened here) before it gives up root, so every process the agent
//! starts is counted, and none can leave: the cgroup files are root's. The counts are the
//! sandbox's own, not the uid's: another sandbox running as the same uid takes nothing from
//! this one's process limit. After the final reap the peak usage, the OOM kills and the refused
//! forks are read for the record, and the cgroups are removed.
//!
//! Where it is not writable (a container whose engine mounts `/sys/fs/cgroup` read-only, a user
//! namespace, a cgroup v2 host: there a sub-cgroup needs a delegated domain with no process of
//! its own, which PID 1 of a container is not) the limits fall back to rlimits set in the child:
//! `RLIMIT_NPROC` (counted per uid, across sandboxes sharing it) and `RLIMIT_DATA` (per process).
//! The record says which one enforced each limit, and why there was no cgroup. The engine's own
//! container limits (`--memory`, `--pids-limit`) still bound the whole sandbox there.

use crate::result::{Enforcement, LimitRecord};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Whether the supervisor looks for a cgroup of the agent's own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum CgroupMode {
    /// Use one where the supervisor's cgroup is writable; rlimits otherwise.
    #[default]
    Auto,
    /// Never: rlimits only (for engines that bound the sandbox themselves).
    Off,
}

/// A cgroup v1 controller the agent's tree is bounded by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controller {
    /// `memory`: `memory.limit_in_bytes`.
    Memory,
    /// `pids`: `pids.max`.
    Pids,
}

impl Controller {
    /// The controller's name in `/proc/self/cgroup` and in mount options.
    pub fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
        }
    }
}

/// Where the agent's cgroups go: the supervisor's own cgroup in each writable hierarchy,
/// found once at start.
#[derive(Debug, Clone)]
pub struct AgentCgroups {
    memory: Result<PathBuf, String>,
    pids: Result<PathBuf, String>,
    prefix: String,
}

impl AgentCgroups {
    /// Finds the supervisor's own cgroup in the `memory` and `pids` hierarchies and checks it
    /// may create children there (by creating and removing one).
    pub fn discover(mode: CgroupMode) -> AgentCgroups {
        let prefix = format!(
            "pitcrew-{}-{}",
            pid_namespace_inode().unwrap_or(0),
            std::process::id()
        );
        if mode == CgroupMode::Off {
            let off = Err("off (--agent-cgroup off)".to_string());
            return AgentCgroups {
                memory: off.clone(),
                pids: off,
                prefix,
            };
        }
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let find = |controller: Controller| {
            let dir = own_cgroup_dir(&mountinfo, &own, controller.name())?;
            let probe = dir.join(format!("{prefix}-probe"));
            std::fs::create_dir(&probe)
                .and_then(|()| std::fs::remove_dir(&probe))
                .map_err(|e| format!("{}: {e}", dir.display()))?;
            Ok(dir)
        };
        let cgroups = AgentCgroups {
            memory: find(Controller::Memory),
            pids: find(Controller::Pids),
            prefix,
        };
        for (controller, slot) in [
            (Controller::Memory, &cgroups.memory),
            (Controller::Pids, &cgroups.pids),
        ] {
            match slot {
                Ok(dir) => tracing::debug!(
                    "agent cgroups ({}) under {}",
                    controller.name(),
                    dir.display()
                ),
                Err(why) => tracing::info!(
                    "no {} cgroup for the agent ({why}); falling back to an rlimit",
                    controller.name()
                ),
            }
        }
        cgroups
    }

    /// Why the agent's tree gets no cgroup of `controller`, if it does not.
    pub fn unavailable(&self, controller: Controller) -> Option<&str> {
        self.slot(controller).as_ref().err().map(String::as_str)
    }

    fn slot(&self, controller: Controller) -> &Result<PathBuf, String> {
        match controller {
            Controller::Memory => &self.memory,
            Controller::Pids => &self.pids,
        }
    }

    /// Creates this iteration's cgroups with their limits and opens their `cgroup.procs` for
    /// the child. Nothing is left behind on failure.
    pub fn create(
        &self,
        iteration: u32,
        memory_bytes: u64,
        processes: u64,
    ) -> Result<IterationCgroups, String> {
        let name = format!("{}-{iteration}", self.prefix);
        let mut made = IterationCgroups::default();
        if let Ok(parent) = &self.memory {
            let dir = make_dir(parent, &name)?;
            made.memory = Some(dir.clone());
            write_value(&dir, "memory.limit_in_bytes", memory_bytes)?;
            // Without swap accounting the file is absent: the memory limit alone holds. TCP
            // buffers are charged to a cgroup v1 only once its TCP limit is set: without it an
            // agent could queue gigabytes in loopback connections, uncounted.
            for extra in [
                "memory.memsw.limit_in_bytes",
                "memory.kmem.tcp.limit_in_bytes",
            ] {
                match write_value(&dir, extra, memory_bytes) {
                    Err(_) if !dir.join(extra).exists() => {}
                    other => other?,
                }
            }
            made.procs.push(open_procs(&dir)?);
        }
        if let Ok(parent) = &self.pids {
            let dir = make_dir(parent, &name)?;
            made.pids = Some(dir.clone());
            write_value(&dir, "pids.max", processes)?;
            made.procs.push(open_procs(&dir)?);
        }
        Ok(made)
    }
}

/// The cgroups of one iteration's agent tree. Dropping removes them (they are empty once the
/// final reap is done).
#[derive(Debug, Default)]
pub struct IterationCgroups {
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
    procs: Vec<OwnedFd>,
}

/// What the cgroups counted while the agent ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Most memory the tree used at once (`memory.max_usage_in_bytes`).
    pub memory_peak: Option<u64>,
    /// Processes of the tree the kernel killed at the memory limit (`oom_kill`).
    pub oom_kills: Option<u64>,
    /// Most processes of the tree at once (`pids.peak`, where the kernel has it).
    pub processes_peak: Option<u64>,
    /// Forks refused at the process limit (`max` in `pids.events`).
    pub refused_forks: Option<u64>,
}

impl IterationCgroups {
    /// The directory of `controller`'s cgroup, if the tree has one.
    pub fn dir(&self, controller: Controller) -> Option<&Path> {
        match controller {
            Controller::Memory => self.memory.as_deref(),
            Controller::Pids => self.pids.as_deref(),
        }
    }

    /// The `cgroup.procs` descriptors the child writes `0` to (close-on-exec).
    pub fn procs_fds(&self) -> Vec<RawFd> {
        self.procs.iter().map(AsRawFd::as_raw_fd).collect()
    }

    /// Reads what the cgroups counted; call after the final reap.
    pub fn usage(&self) -> Usage {
        let mut usage = Usage::default();
        if let Some(dir) = &self.memory {
            usage.memory_peak = read_number(&dir.join("memory.max_usage_in_bytes"));
            usage.oom_kills = read_key(&dir.join("memory.oom_control"), "oom_kill");
        }
        if let Some(dir) = &self.pids {
            usage.processes_peak = read_number(&dir.join("pids.peak"));
            usage.refused_forks = read_key(&dir.join("pids.events"), "max");
        }
        usage
    }
}

impl Drop for IterationCgroups {
    fn drop(&mut self) {
        self.procs.clear();
        for dir in [self.memory.take(), self.pids.take()].into_iter().flatten() {
            // A process the final reap killed may still be leaving its cgroup for a moment.
            let mut result = std::fs::remove_dir(&dir);
            for _ in 0..50 {
                match &result {
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                        std::thread::sleep(Duration::from_millis(10));
                        result = std::fs::remove_dir(&dir);
                    }
                    _ => break,
                }
            }
            if let Err(e) = result {
                tracing::warn!("agent cgroup {}: not removed: {e}", dir.display());
            }
        }
    }
}

/// The inode of this process's PID namespace: unique among the namespaces alive on the host,
/// so two sandboxes' cgroups never share a name.
fn pid_namespace_inode() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
}

/// The directory of this process's own cgroup in the v1 hierarchy of `controller`, from
/// `/proc/self/mountinfo` and `/proc/self/cgroup`.
pub fn own_cgroup_dir(mountinfo: &str, own: &str, controller: &str) -> Result<PathBuf, String> {
    let path = own
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            controllers
                .split(',')
                .any(|c| c == controller)
                .then_some(path)
        })
        .next()
        .ok_or_else(|| {
            if own.lines().any(|l| l.starts_with("0::")) {
                format!(
                    "no cgroup v1 {controller} hierarchy (cgroup v2: a sub-cgroup for the agent \
                     needs a delegated domain without processes of its own)"
                )
            } else {
                format!("no cgroup v1 {controller} hierarchy")
            }
        })?;
    let (root, mountpoint) = mountinfo
        .lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let mut after = after.split(' ');
            let (fstype, _source, options) = (after.next()?, after.next()?, after.next()?);
            if fstype != "cgroup" || !options.split(',').any(|o| o == controller) {
                return None;
            }
            let fields: Vec<&str> = before.split(' ').collect();
            Some((unescape(fields.get(3)?), unescape(fields.get(4)?)))
        })
        .next()
        .ok_or_else(|| format!("the cgroup v1 {controller} hierarchy is not mounted"))?;
    let relative = if root == "/" {
        Some(path)
    } else {
        path.strip_prefix(root.as_str())
            .filter(|rest| rest.is_empty() || rest.starts_with('/'))
    }
    .ok_or_else(|| {
        format!("own {controller} cgroup {path} lies outside the mounted part ({root})")
    })?;
    let mut dir = PathBuf::from(mountpoint);
    dir.extend(relative.split('/').filter(|c| !c.is_empty()));
    Ok(dir)
}

/// Undoes mountinfo's octal escapes (`\040` for a space, …).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        if let (b'\\', Some(digits)) = (bytes[i], octal) {
            let code = digits.iter().fold(0u32, |n, d| n * 8 + u32::from(d - b'0'));
            out.push(u8::try_from(code).unwrap_or(b'?'));
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn make_dir(parent: &Path, name: &str) -> Result<PathBuf, String> {
    let dir = parent.join(name);
    // A cgroup of this name can only be a leftover of a supervisor killed mid-iteration with
    // the same pid in the same namespace: empty, since its processes died with the namespace.
    let _ = std::fs::remove_dir(&dir);
    std::fs::create_dir(&dir).map_err(|e| format!("agent cgroup {}: {e}", dir.display()))?;
    Ok(dir)
}

fn write_value(dir: &Path, file: &str, value: u64) -> Result<(), String> {
    let path = dir.join(file);
    OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|mut f| f.write_all(value.to_string().as_bytes()))
        .map_err(|e| format!("agent cgroup {}: {e}", path.display()))
}

fn open_procs(dir: &Path) -> Result<OwnedFd, String> {
    let path = dir.join("cgroup.procs");
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(&path)
        .map(OwnedFd::from)
        .map_err(|e| format!("agent cgroup {}: {e}", path.display()))
}

fn read_text(path: &Path) -> Option<String> {
    let mut text = String::new();
    File::open(path)
        .ok()?
        .take(64 * 1024)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

fn read_number(path: &Path) -> Option<u64> {
    read_text(path)?.trim().parse().ok()
}

/// The value of `key` in a flat-keyed cgroup file (`key value` lines).
fn read_key(path: &Path, key: &str) -> Option<u64> {
    read_text(path)?.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// How `limit` is enforced: by the tree's cgroup of `controller` if it has one, else by
/// `fallback` (with the reason there is no cgroup).
pub fn limit_record(
    limit: u64,
    controller: Controller,
    fallback: Enforcement,
    agent_cgroups: &AgentCgroups,
    cgroups: &IterationCgroups,
) -> LimitRecord {
    match cgroups.dir(controller) {
        Some(dir) => LimitRecord {
            limit,
            enforced_by: Enforcement::CgroupV1,
            cgroup: Some(dir.display().to_string()),
            ..LimitRecord::default()
        },
        None => LimitRecord {
            limit,
            enforced_by: fallback,
            cgroup_unavailable: agent_cgroups.unavailable(controller).map(String::from),
            ..LimitRecord::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
34 25 0:29 / /sys/fs/cgroup rw,relatime shared:9 - tmpfs tmpfs rw,mode=755
38 34 0:33 / /sys/fs/cgroup/memory rw,relatime shared:13 - cgroup cgroup rw,memory
41 34 0:36 / /sys/fs/cgroup/pids rw,relatime shared:16 - cgroup cgroup rw,pids
42 34 0:37 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:17 - cgroup cgroup rw,cpu,cpuacct
43 34 0:38 / /sys/fs/cgroup/unified rw,relatime shared:18 - cgroup2 cgroup2 rw
";

    #[test]
    fn own_cgroup_is_found_under_the_controllers_mount() {
        let own = "8:pids:/\n4:memory:/process_api/ab12\n1:cpu,cpuacct:/x\n0::/\n";
        assert_eq!(
            own_cgroup_dir(MOUNTINFO, own, "memory").unwrap(),
            Path::new("/sys/fs/cgroup/memory/process_api/ab12")
        );
        assert_eq!(
            own_cgroup_dir(MOUNTINFO, own, "pids").unwrap(),
            Path::new("/sys/fs/cgroup/pids")
        );
    }

    #[test]
    fn a_mount_of_part_of_the_hierarchy_is_resolved_against_its_root() {
        // A container's view: the hierarchy mounted from the container's own cgroup down.
        let mountinfo = "38 34 0:33 /machine/c1 /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup \
                         ro,memory\n";
        let own = "4:memory:/machine/c1/agent\n";
        assert_eq!(
            own_cgroup_dir(mountinfo, own, "memory").unwrap(),
            Path::new("/sys/fs/cgroup/memory/agent")
        );
        let outside = "4:memory:/machine/c10\n";
        let err = own_cgroup_dir(mountinfo, outside, "memory").unwrap_err();
        assert!(err.contains("outside the mounted part"), "{err}");
    }

    #[test]
    fn cgroup_v2_only_and_unmounted_hierarchies_are_named() {
        let err = own_cgroup_dir(MOUNTINFO, "0::/user.slice\n", "memory").unwrap_err();
        assert!(err.contains("cgroup v2"), "{err}");
        let err = own_cgroup_dir("", "4:memory:/\n", "memory").unwrap_err();
        assert!(err.contains("not mounted"), "{err}");
    }

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape(r"/a\\"), r"/a\\");
        assert_eq!(unescape(r"/end\04"), r"/end\04");
    }

    #[test]
    fn flat_keyed_files_are_read_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("memory.oom_control");
        std::fs::write(&file, "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n").unwrap();
        assert_eq!(read_key(&file, "oom_kill"), Some(3));
        assert_eq!(read_key(&file, "absent"), None);
    }
}
