//! What the forked child reports through the status pipe, in fixed-size words: the stage that
//! failed (with its errno), or the confinement it confirmed right before `execve`.

use crate::result::LandlockState;

/// A stage of the child's setup, reported when it fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Stage {
    /// Redirecting stdin/stdout/stderr.
    Stdio = 1,
    /// `setsid`.
    Setsid = 2,
    /// Dropping the capability bounding set.
    Bounding = 3,
    /// `setgroups`.
    Groups = 4,
    /// `setresgid`.
    Gid = 5,
    /// `setresuid`.
    Uid = 6,
    /// Clearing the ambient set.
    Ambient = 7,
    /// Clearing the effective, permitted and inheritable sets (`capset`).
    Capset = 8,
    /// Reading back uid, gid and groups.
    IdsReadback = 9,
    /// Reading back every capability set.
    CapsReadback = 10,
    /// `chdir` to the workdir.
    Chdir = 11,
    /// Marking inherited fds close-on-exec.
    CloseFds = 12,
    /// `PR_SET_NO_NEW_PRIVS` and its read-back.
    NoNewPrivs = 13,
    /// Landlock `restrict_self`.
    Landlock = 14,
    /// Landlock mode `required`, but the ruleset was not fully enforced.
    LandlockRequired = 15,
    /// Restoring the signal mask.
    SignalMask = 16,
    /// `execve` itself.
    Exec = 17,
    /// Installing the seccomp filter ([`super::seccomp`]).
    Seccomp = 18,
    /// Setting the resource limits (`RLIMIT_NPROC`, `RLIMIT_DATA`, `RLIMIT_CORE`).
    Rlimits = 19,
    /// Joining the agent's cgroups.
    Cgroup = 20,
    /// Making the agent the OOM killer's first choice (`/proc/self/oom_score_adj`).
    OomScore = 21,
    /// Making the child dumpable again after a non-dumpable supervisor's fork.
    Dumpable = 22,
    /// Joining the agent's own network namespace (`setns`, [`super::netns::AgentNamespace`]).
    Netns = 23,
    /// Joining the user namespace the agent's network namespace was made in (`setns`,
    /// [`super::netns_helper`]).
    Userns = 24,
    /// Hiding `/run` in a mount namespace of the agent's own, with its own network namespace
    /// ([`super::private_run::AgentRun`]).
    PrivateRun = 25,
}

impl Stage {
    const ALL: [Stage; 25] = [
        Stage::Stdio,
        Stage::Setsid,
        Stage::Bounding,
        Stage::Groups,
        Stage::Gid,
        Stage::Uid,
        Stage::Ambient,
        Stage::Capset,
        Stage::IdsReadback,
        Stage::CapsReadback,
        Stage::Chdir,
        Stage::CloseFds,
        Stage::NoNewPrivs,
        Stage::Landlock,
        Stage::LandlockRequired,
        Stage::SignalMask,
        Stage::Exec,
        Stage::Seccomp,
        Stage::Rlimits,
        Stage::Cgroup,
        Stage::OomScore,
        Stage::Dumpable,
        Stage::Netns,
        Stage::Userns,
        Stage::PrivateRun,
    ];

    /// The stage's name in reasons (`confine: setresuid: …`).
    pub fn name(self) -> &'static str {
        match self {
            Stage::Stdio => "stdio",
            Stage::Setsid => "setsid",
            Stage::Bounding => "bounding-set",
            Stage::Groups => "setgroups",
            Stage::Gid => "setresgid",
            Stage::Uid => "setresuid",
            Stage::Ambient => "ambient-caps",
            Stage::Capset => "capset",
            Stage::IdsReadback => "ids-readback",
            Stage::CapsReadback => "caps-readback",
            Stage::Chdir => "chdir-workdir",
            Stage::CloseFds => "close-fds",
            Stage::NoNewPrivs => "no-new-privs",
            Stage::Landlock => "landlock",
            Stage::LandlockRequired => "landlock-required",
            Stage::SignalMask => "signal-mask",
            Stage::Exec => "exec",
            Stage::Seccomp => "seccomp",
            Stage::Rlimits => "rlimits",
            Stage::Cgroup => "cgroup",
            Stage::OomScore => "oom-score",
            Stage::Dumpable => "dumpable",
            Stage::Netns => "network-namespace",
            Stage::Userns => "user-namespace",
            Stage::PrivateRun => "private-run",
        }
    }

    /// Decodes a stage number from the status pipe.
    pub fn from_u32(n: u32) -> Option<Stage> {
        Stage::ALL.into_iter().find(|s| *s as u32 == n)
    }
}

/// A failed stage in the child, with the errno (0 when the failure is a policy decision).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildFailure {
    /// Which stage.
    pub stage: Stage,
    /// `errno` after the failing call.
    pub errno: i32,
}

/// What the child confirmed just before exec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildReport {
    /// Landlock status (`off` when mode is off).
    pub landlock: LandlockState,
    /// `PR_GET_NO_NEW_PRIVS` returned 1.
    pub no_new_privs: bool,
    /// Every capability set read back empty.
    pub caps_cleared: bool,
    /// The seccomp filter is installed (`PR_GET_SECCOMP` read back 2).
    pub seccomp: bool,
}

impl ChildReport {
    /// Encodes the report as four words for the status pipe.
    pub fn to_words(self) -> [u32; 4] {
        let landlock = match self.landlock {
            LandlockState::FullyEnforced => 1,
            LandlockState::PartiallyEnforced => 2,
            LandlockState::NotEnforced => 3,
            LandlockState::Off => 4,
        };
        [
            landlock,
            u32::from(self.no_new_privs),
            u32::from(self.caps_cleared),
            u32::from(self.seccomp),
        ]
    }

    /// Decodes [`ChildReport::to_words`].
    pub fn from_words(words: [u32; 4]) -> Option<ChildReport> {
        let landlock = match words[0] {
            1 => LandlockState::FullyEnforced,
            2 => LandlockState::PartiallyEnforced,
            3 => LandlockState::NotEnforced,
            4 => LandlockState::Off,
            _ => return None,
        };
        Some(ChildReport {
            landlock,
            no_new_privs: words[1] == 1,
            caps_cleared: words[2] == 1,
            seccomp: words[3] == 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_numbers_round_trip() {
        for stage in Stage::ALL {
            assert_eq!(Stage::from_u32(stage as u32), Some(stage));
        }
        assert_eq!(Stage::from_u32(0), None);
    }

    #[test]
    fn report_words_round_trip() {
        let report = ChildReport {
            landlock: LandlockState::PartiallyEnforced,
            no_new_privs: true,
            caps_cleared: false,
            seccomp: true,
        };
        assert_eq!(ChildReport::from_words(report.to_words()), Some(report));
    }
}
