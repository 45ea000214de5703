//! Step 1 of an iteration (and the reap after the agent): kill every process but the
//! supervisor, and make sure none is left.
//!
//! As PID 1: `kill(-1, SIGTERM)` (and `SIGCONT`, so stopped processes see it), a grace period,
//! `kill(-1, SIGKILL)`, reaping all along, until `/proc` shows no process but PID 1; rescans catch
//! processes forked meanwhile. Process-group kills are escapable (`setsid`, dumb-init #191);
//! `kill(-1)` is not. `kill(-1)` is only ever sent when `getpid() == 1` (Dobby PR #456): from
//! any other pid it would hit every process the caller may signal.
//!
//! Not PID 1 (degraded): the supervisor is a child subreaper, so orphans of its descendants
//! are re-parented to it; descendants are found by following `/proc/*/stat` parent links and
//! signalled one by one, with the same TERM, grace, KILL sequence. (A cgroup v2 `cgroup.kill`
//! would be stronger but needs a cgroup of our own; not done.)
//!
//! Not PID 1 and not root (unprivileged, under someone else's init): what an earlier session
//! left is not our descendant (its orphans went to that init), so every process whose real or
//! saved uid is ours is the reap's, except ourselves and our ancestors (the exec machinery
//! that started us), signalled one by one. Zombies are skipped: they run nothing, and only
//! their parent (the foreign init) can reap them.
//!
//! Everything is bounded by `limits.reap_budget_ms`.
//!
//! Processes listed in [`Supervisor::spared`] (the control-socket bridges of connected hosts)
//! survive: then, as PID 1, every other process is signalled by pid instead of `kill(-1)`, and
//! the `/proc` rescans catch whatever was forked meanwhile.

use super::state::Supervisor;
use crate::result::SupervisorMode;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::collections::{HashMap, HashSet};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// The longest the reap sleeps between rescans of `/proc` (a process may exit without a
/// `SIGCHLD` reaching us, e.g. a zombie whose parent is still being killed).
const RESCAN: Duration = Duration::from_millis(50);

/// What a reap did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReapOutcome {
    /// Distinct processes (other than the supervisor) seen or reaped, i.e. killed.
    pub killed: u64,
    /// Processes still present when the budget ran out (0 on success).
    pub remaining: u64,
    /// Wall-clock time spent.
    pub elapsed: Duration,
}

/// Kills and reaps every process except the supervisor, within `budget`; `grace` is the time
/// between TERM and KILL.
pub fn reap_everything(ctx: &mut Supervisor, grace: Duration, budget: Duration) -> ReapOutcome {
    reap_everything_unless(ctx, grace, budget, &mut || false)
}

/// [`reap_everything`], cutting the grace short (KILL at once) as soon as `kill_now` says so;
/// it is asked before TERM and at every rescan of the grace (a disk budget passed meanwhile).
pub fn reap_everything_unless(
    ctx: &mut Supervisor,
    grace: Duration,
    budget: Duration,
    kill_now: &mut dyn FnMut() -> bool,
) -> ReapOutcome {
    let start = Instant::now();
    let deadline = start + budget;
    let mut seen: HashSet<i32> = HashSet::new();
    let mut outcome = ReapOutcome::default();

    if is_alone(ctx, &mut seen) {
        outcome.elapsed = start.elapsed();
        return outcome;
    }
    let mut alone = false;
    if !kill_now() {
        tracing::info!("reap: {} process(es) present; SIGTERM", seen.len());
        signal_all(ctx, Signal::SIGTERM);
        signal_all(ctx, Signal::SIGCONT);
        let grace_end = (start + grace).min(deadline);
        alone = wait_until_alone(ctx, grace_end, &mut seen, kill_now);
    }
    while !alone && Instant::now() < deadline {
        tracing::info!("reap: survivors after the grace period; SIGKILL");
        signal_all(ctx, Signal::SIGKILL);
        let round_end = (Instant::now() + RESCAN * 4).min(deadline);
        alone = wait_until_alone(ctx, round_end, &mut seen, &mut || false);
    }
    if !alone {
        let left = others(ctx);
        outcome.remaining = left.len() as u64;
        tracing::warn!(
            "reap: budget exhausted with {} process(es) left: {left:?}",
            left.len()
        );
    }
    outcome.killed = seen.len() as u64;
    outcome.elapsed = start.elapsed();
    outcome
}

/// Reaps what has exited and reports whether no other process is left (recording every pid
/// seen in `seen`).
fn is_alone(ctx: &mut Supervisor, seen: &mut HashSet<i32>) -> bool {
    let pass = ctx.reaper.reap(|pid, _| {
        seen.insert(pid);
    });
    if ctx.proc_is_ours {
        let left = others(ctx);
        seen.extend(left.iter().copied());
        left.is_empty() && pass.no_children
    } else {
        pass.no_children
    }
}

/// Rescans until no other process is left (true) or `until`, or until `stop` says so (false).
fn wait_until_alone(
    ctx: &mut Supervisor,
    until: Instant,
    seen: &mut HashSet<i32>,
    stop: &mut dyn FnMut() -> bool,
) -> bool {
    loop {
        if is_alone(ctx, seen) {
            return true;
        }
        let now = Instant::now();
        if now >= until || stop() {
            return false;
        }
        let wait = (until - now).min(RESCAN);
        let millis = u16::try_from(wait.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(ctx.signals.as_fd(), PollFlags::POLLIN)];
        // Any error (EINTR cannot happen: signals are blocked) just means another rescan.
        let _ = poll(&mut fds, PollTimeout::from(millis.max(1)));
        ctx.signals.drain();
    }
}

/// Sends `sig` to every process the reap is responsible for.
fn signal_all(ctx: &Supervisor, sig: Signal) {
    let pid1 = ctx.info.pid1 && nix::unistd::getpid().as_raw() == 1;
    if ctx.info.mode == SupervisorMode::Unprivileged || (pid1 && !ctx.spared.is_empty()) {
        // One by one, from the scan. ESRCH: exited meanwhile; EPERM (unprivileged): not ours
        // any more (its uid changed).
        for pid in others(ctx) {
            let _ = kill(Pid::from_raw(pid), sig);
        }
        return;
    }
    if pid1 {
        // As PID 1 of the namespace, -1 means every process in it except ourselves.
        if let Err(err) = kill(Pid::from_raw(-1), sig) {
            if err != nix::errno::Errno::ESRCH {
                tracing::warn!("reap: kill(-1, {sig}) failed: {err}");
            }
        }
        return;
    }
    for pid in descendants(ctx.pid) {
        // ESRCH: it exited meanwhile. A pid reused since the scan would have to be our
        // descendant again to be listed, which is why only descendants are signalled.
        let _ = kill(Pid::from_raw(pid), sig);
    }
}

/// The processes the reap must remove: as PID 1 every process but us, else our descendants.
fn others(ctx: &Supervisor) -> Vec<i32> {
    if !ctx.proc_is_ours {
        return Vec::new();
    }
    let all = if ctx.info.pid1 {
        proc_pids().into_iter().filter(|&p| p != ctx.pid).collect()
    } else if ctx.info.mode == SupervisorMode::Unprivileged {
        same_uid_but_ancestors(ctx.pid, nix::unistd::geteuid().as_raw())
    } else {
        descendants(ctx.pid)
    };
    all.into_iter()
        .filter(|p| !(ctx.spared.contains(p) && owned_by_root(*p)))
        .collect()
}

/// Whether `/proc/<pid>/status` shows real uid 0 (a spared pid that exited and was reused by
/// an agent process would not).
fn owned_by_root(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| status_uids(&s))
        .is_some_and(|[real, ..]| real == 0)
}

/// The live processes whose real or saved uid is `uid`, except `me` and its ancestors. A
/// process is live while any of its threads is: a thread group whose leader exited
/// (`syscall(SYS_exit)`) shows `State: Z` while its other threads run on, and must be reaped
/// like any other; only a process all of whose threads are gone is a zombie left to its parent.
fn same_uid_but_ancestors(me: i32, uid: u32) -> Vec<i32> {
    let mut ancestors = HashSet::from([me]);
    let mut at = me;
    while at > 1 {
        let Some(parent) = std::fs::read_to_string(format!("/proc/{at}/stat"))
            .ok()
            .and_then(|s| parse_stat_ppid(&s))
        else {
            break;
        };
        ancestors.insert(parent);
        at = parent;
    }
    proc_pids()
        .into_iter()
        .filter(|p| !ancestors.contains(p))
        .filter(|&p| {
            let Ok(status) = std::fs::read_to_string(format!("/proc/{p}/status")) else {
                return false;
            };
            status_uid_matches(&status, uid) && has_live_thread(p)
        })
        .collect()
}

/// Whether any thread of process `pid` is neither a zombie nor dead (its leader's state alone
/// says `Z` once the leader exited, whatever the other threads do).
fn has_live_thread(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(Result::ok).any(|task| {
        std::fs::read_to_string(task.path().join("stat"))
            .ok()
            .and_then(|stat| parse_stat_state(&stat))
            .is_some_and(|state| state != 'Z' && state != 'X')
    })
}

/// The state letter from the text of `/proc/<pid>/stat` (the field after the command name).
fn parse_stat_state(stat: &str) -> Option<char> {
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// Whether the `Uid:` line of a `/proc/<pid>/status` text has `uid` as its real or saved uid
/// (what `kill(2)` checks against the sender's uids).
fn status_uid_matches(status: &str, uid: u32) -> bool {
    status_uids(status).is_some_and(|[real, _, saved, _]| real == uid || saved == uid)
}

/// The real, effective, saved and filesystem uids of a `/proc/<pid>/status` text.
fn status_uids(status: &str) -> Option<[u32; 4]> {
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    let mut ids = line.split_whitespace().skip(1).map(|v| v.parse().ok());
    Some([ids.next()??, ids.next()??, ids.next()??, ids.next()??])
}

/// Every numeric entry of `/proc`.
pub fn proc_pids() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .collect()
}

/// The parent pid from the text of `/proc/<pid>/stat` (the field after the `)` that ends
/// the command name, which may itself contain spaces and parentheses).
pub fn parse_stat_ppid(stat: &str) -> Option<i32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let _state = fields.next()?;
    fields.next()?.parse().ok()
}

/// Every descendant of `root`, following the parent links in `/proc/*/stat`.
pub fn descendants(root: i32) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for pid in proc_pids() {
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            if let Some(ppid) = parse_stat_ppid(&stat) {
                children.entry(ppid).or_default().push(pid);
            }
        }
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        if let Some(kids) = children.get(&p) {
            for &kid in kids {
                if kid != root && !out.contains(&kid) {
                    out.push(kid);
                    stack.push(kid);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_real_or_saved_uid_is_what_counts() {
        let status = "Name:\tsh\nState:\tS (sleeping)\nUid:\t1000\t0\t1000\t0\n";
        assert!(status_uid_matches(status, 1000));
        assert!(!status_uid_matches(status, 0));
        assert!(status_uid_matches("Uid:\t5\t5\t7\t5\n", 7));
        assert!(!status_uid_matches("Name:\tx\n", 7));
    }

    #[test]
    fn this_process_and_its_ancestors_are_never_the_reaps_but_others_of_its_uid_are() {
        let me = std::process::id() as i32;
        let uid = nix::unistd::geteuid().as_raw();
        // A process of our uid that is not an ancestor is listed.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let listed = same_uid_but_ancestors(me, uid);
        let _ = child.kill();
        let _ = child.wait();
        assert!(listed.contains(&(child.id() as i32)), "{listed:?}");
        assert!(!listed.contains(&me));
        let parent = nix::unistd::getppid().as_raw();
        assert!(!listed.contains(&parent), "{parent} in {listed:?}");
    }

    /// A process whose main thread exited while another thread runs on (`State: Z` for the
    /// leader) is live and listed; a true zombie (every thread gone, not yet waited for) is not.
    #[test]
    fn a_thread_group_whose_leader_exited_is_listed_but_a_true_zombie_is_not() {
        let python = std::process::Command::new("python3").arg("-V").output();
        if !pitcrew_test_support::prerequisite(
            python.is_ok_and(|o| o.status.success()),
            "needs python3 (apt-get install python3)",
        ) {
            return;
        }
        let me = std::process::id() as i32;
        let uid = nix::unistd::geteuid().as_raw();
        // The main thread leaves through exit(2), not exit_group(2); the other one sleeps on.
        let script = "import ctypes, threading, time\n\
                      threading.Thread(target=time.sleep, args=(30,)).start()\n\
                      ctypes.CDLL(None).syscall(60 if ctypes.sizeof(ctypes.c_void_p) == 8 else 1, 0)\n";
        let mut leaderless = std::process::Command::new("python3")
            .args(["-c", script])
            .spawn()
            .expect("python3");
        let pid = leaderless.id() as i32;
        let mut zombie = std::process::Command::new("true").spawn().expect("true");
        let zpid = zombie.id() as i32;
        // Both settled: the leader gone, `true` exited (not yet waited for).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let state = |p: i32| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| parse_stat_state(&s))
        };
        while (state(pid) != Some('Z') || state(zpid) != Some('Z'))
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let settled = (state(pid), state(zpid));
        let listed = same_uid_but_ancestors(me, uid);
        let _ = leaderless.kill();
        let _ = leaderless.wait();
        let _ = zombie.wait();
        assert_eq!(
            settled,
            (Some('Z'), Some('Z')),
            "leader and zombie did not settle"
        );
        assert_eq!(state(pid), None, "the thread group did not end on SIGKILL");
        assert!(listed.contains(&pid), "leaderless {pid} not in {listed:?}");
        assert!(!listed.contains(&zpid), "true zombie {zpid} in {listed:?}");
    }

    #[test]
    fn stat_parsing_survives_odd_command_names() {
        assert_eq!(parse_stat_ppid("42 (sleep) S 7 42 42 0 -1"), Some(7));
        assert_eq!(parse_stat_ppid("42 (a) b) (c) R 9 1 1"), Some(9));
        assert_eq!(parse_stat_ppid("garbage"), None);
    }

    #[test]
    fn descendants_of_this_test_include_a_spawned_child() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let me = std::process::id() as i32;
        let found = descendants(me);
        let pid = child.id() as i32;
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.contains(&pid), "{found:?} lacks {pid}");
    }
}
