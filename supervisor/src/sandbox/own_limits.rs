//! The supervisor's own resource limits, as it started with them, set again after every reap.
//!
//! The seccomp filter keeps the agent's tree from `prlimit64` on any process but itself
//! ([`super::seccomp`]), but in the unprivileged mode any process of the supervisor's uid could
//! set its limits, and the agent inherits every limit the supervisor holds but the few
//! [`super::confine`] sets. A `RLIMIT_FSIZE` of 0 would lose every later record (and kill the
//! next agent with `SIGXFSZ`), a `RLIMIT_NOFILE` of 4 fail the next iteration, a `RLIMIT_CPU`
//! of 0 kill later agents. So the limits are captured once at start and set back after every
//! reap, before a record is written and before the next agent is launched: a soft limit back
//! to what it was, a hard one back where the kernel lets this process raise it (root, or what
//! was not lowered); where a hard limit stays lower, the soft one goes as high as it allows and
//! the record names it.

/// Every resource the kernel limits (`RLIMIT_CPU` through `RLIMIT_RTTIME`), with its name.
const RESOURCES: [(libc::__rlimit_resource_t, &str); 16] = [
    (libc::RLIMIT_CPU, "RLIMIT_CPU"),
    (libc::RLIMIT_FSIZE, "RLIMIT_FSIZE"),
    (libc::RLIMIT_DATA, "RLIMIT_DATA"),
    (libc::RLIMIT_STACK, "RLIMIT_STACK"),
    (libc::RLIMIT_CORE, "RLIMIT_CORE"),
    (libc::RLIMIT_RSS, "RLIMIT_RSS"),
    (libc::RLIMIT_NPROC, "RLIMIT_NPROC"),
    (libc::RLIMIT_NOFILE, "RLIMIT_NOFILE"),
    (libc::RLIMIT_MEMLOCK, "RLIMIT_MEMLOCK"),
    (libc::RLIMIT_AS, "RLIMIT_AS"),
    (libc::RLIMIT_LOCKS, "RLIMIT_LOCKS"),
    (libc::RLIMIT_SIGPENDING, "RLIMIT_SIGPENDING"),
    (libc::RLIMIT_MSGQUEUE, "RLIMIT_MSGQUEUE"),
    (libc::RLIMIT_NICE, "RLIMIT_NICE"),
    (libc::RLIMIT_RTPRIO, "RLIMIT_RTPRIO"),
    (libc::RLIMIT_RTTIME, "RLIMIT_RTTIME"),
];

/// The limits the supervisor started with.
#[derive(Debug, Clone, Default)]
pub struct OwnLimits {
    saved: Vec<(libc::__rlimit_resource_t, &'static str, libc::rlimit)>,
}

/// What [`OwnLimits::restore`] found changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoredLimits {
    /// `NAME soft/hard -> soft/hard` of each limit set back.
    pub restored: Vec<String>,
    /// Limits that could not be set back all the way (a lowered hard limit without the right
    /// to raise it), with what they are now.
    pub lowered: Vec<String>,
}

fn get(resource: libc::__rlimit_resource_t) -> Option<libc::rlimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given, which lives for the call.
    (unsafe { libc::getrlimit(resource, &mut limit) } == 0).then_some(limit)
}

fn set(resource: libc::__rlimit_resource_t, limit: libc::rlimit) -> bool {
    // SAFETY: setrlimit reads the struct it is given, which lives for the call.
    unsafe { libc::setrlimit(resource, &limit) == 0 }
}

/// `soft/hard`, with `inf` for no limit.
fn show(limit: libc::rlimit) -> String {
    let one = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            "inf".to_string()
        } else {
            v.to_string()
        }
    };
    format!("{}/{}", one(limit.rlim_cur), one(limit.rlim_max))
}

impl OwnLimits {
    /// The limits of this process now: call once at start.
    pub fn capture() -> OwnLimits {
        OwnLimits {
            saved: RESOURCES
                .iter()
                .filter_map(|&(resource, name)| get(resource).map(|l| (resource, name, l)))
                .collect(),
        }
    }

    /// Sets every changed limit back (see the module documentation).
    pub fn restore(&self) -> RestoredLimits {
        let mut out = RestoredLimits::default();
        for &(resource, name, saved) in &self.saved {
            let Some(now) = get(resource) else { continue };
            if (now.rlim_cur, now.rlim_max) == (saved.rlim_cur, saved.rlim_max) {
                continue;
            }
            if set(resource, saved) {
                out.restored
                    .push(format!("{name} {} -> {}", show(now), show(saved)));
                continue;
            }
            // A hard limit lowered below what it was: as much of the soft one as it allows.
            let best = libc::rlimit {
                rlim_cur: saved.rlim_cur.min(now.rlim_max),
                rlim_max: now.rlim_max,
            };
            let _ = set(resource, best);
            let after = get(resource).unwrap_or(now);
            out.lowered.push(format!(
                "{name} {} (was {} at start; the hard limit cannot be raised again)",
                show(after),
                show(saved)
            ));
        }
        for lowered in &out.lowered {
            tracing::warn!("own-limits: {lowered}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a forked child without privilege (uid 65534 when the test runs as root): lower its
    /// own limits as another process of the uid could, then restore. Exit code 0 when the soft
    /// limit came back and the lowered hard one is named with the most it still allows.
    #[test]
    fn changed_limits_are_set_back_and_a_lowered_hard_limit_is_named() {
        // SAFETY: the child makes id and rlimit calls, allocates in capture/restore (this test's
        // thread holds no allocator lock across fork) and _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = (|| {
                // SAFETY: reads and changes the child's own ids; no memory is passed.
                let dropped =
                    unsafe { libc::getuid() != 0 || libc::setresuid(65534, 65534, 65534) == 0 };
                dropped.then_some(())?;
                let fsize = get(libc::RLIMIT_FSIZE)?;
                let nofile = get(libc::RLIMIT_NOFILE)?;
                let limits = OwnLimits::capture();
                let zero = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: fsize.rlim_max,
                };
                let four = libc::rlimit {
                    rlim_cur: 4,
                    rlim_max: 64.min(nofile.rlim_max),
                };
                (set(libc::RLIMIT_FSIZE, zero) && set(libc::RLIMIT_NOFILE, four)).then_some(())?;
                let restored = limits.restore();
                let ok = get(libc::RLIMIT_FSIZE)?.rlim_cur == fsize.rlim_cur
                    && get(libc::RLIMIT_NOFILE)?.rlim_cur == four.rlim_max
                    && restored.restored.len() == 1
                    && restored.restored[0].starts_with("RLIMIT_FSIZE 0/")
                    && restored.lowered.len() == 1
                    && restored.lowered[0]
                        .starts_with(&format!("RLIMIT_NOFILE {0}/{0} ", four.rlim_max));
                ok.then_some(0)
            })()
            .unwrap_or(1);
            // SAFETY: ends the forked child without running the test harness's exit path.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(libc::WEXITSTATUS(status), 0);
    }

    #[test]
    fn nothing_changed_says_nothing() {
        assert_eq!(OwnLimits::capture().restore(), RestoredLimits::default());
    }
}
