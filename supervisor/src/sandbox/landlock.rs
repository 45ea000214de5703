//! Landlock for the agent's tree: the pinned ABI, what the running kernel offers, and the
//! ruleset (read everywhere, write only under the writable roots and a few devices; abstract
//! sockets and signals scoped).

use landlock::{
    path_beneath_rules, Access, AccessFs, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope, ABI,
};
use std::os::fd::OwnedFd;

/// The Landlock ABI whose filesystem rights and scopes are handled. Pinned (not the running
/// kernel's) so that a kernel upgrade cannot silently change what the agent may do; V5 (Linux
/// 6.10) adds `IOCTL_DEV`, V6 (Linux 6.12) the scopes: the agent's tree may neither connect to
/// an abstract Unix socket nor signal a process created outside its Landlock domain (the host's
/// processes, other sandboxes' agents of the same uid). On older kernels best effort enforces
/// what the kernel knows ("partially-enforced"), and mode `required` refuses.
pub const LANDLOCK_ABI: ABI = ABI::V6;

/// Device files the agent may write to (missing ones are skipped silently).
///
/// Unlike the writable roots these are opened *following* symlinks (`path_beneath_rules`): some
/// runtimes make `/dev/ptmx` a link to `pts/ptmx`. That is safe because every one of them, and
/// any link on the way, lives in the root-owned `/dev` (or a devpts/tmpfs mounted there by the
/// runtime), which the agent cannot change: it may create entries in `/dev/shm` (world-writable,
/// sticky) but not replace `/dev/shm` or any of the others.
const DEVICE_RW: [&str; 7] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/shm",
];

/// Whether the running kernel offers Landlock, and why not when it does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LandlockAvailability {
    /// Available, at this ABI version.
    Available(u32),
    /// Not available, and why (kernel built without it, disabled at boot, refused by a
    /// seccomp profile, …).
    Unavailable(String),
}

impl LandlockAvailability {
    /// Asks the kernel (`landlock_create_ruleset` with the VERSION flag).
    pub fn probe() -> LandlockAvailability {
        const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
        // SAFETY: with a NULL attribute pointer, size 0 and the VERSION flag the syscall only
        // returns a number; it reads no memory and creates no file descriptor.
        let abi = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<u8>(),
                0usize,
                LANDLOCK_CREATE_RULESET_VERSION,
            )
        };
        match u32::try_from(abi) {
            Ok(abi) if abi > 0 => LandlockAvailability::Available(abi),
            _ => {
                let err = std::io::Error::last_os_error();
                LandlockAvailability::Unavailable(match err.raw_os_error() {
                    Some(libc::ENOSYS) => {
                        "the kernel has no Landlock (built without CONFIG_SECURITY_LANDLOCK, or \
                         the call is filtered)"
                            .to_string()
                    }
                    Some(libc::EOPNOTSUPP) => {
                        "Landlock is built in but not enabled (add it to the kernel's lsm= list)"
                            .to_string()
                    }
                    Some(libc::EPERM | libc::EACCES) => format!(
                        "landlock_create_ruleset: {err}: refused by a seccomp filter (or another \
                         security module) around this process, which must allow the landlock_* \
                         system calls for pitcrew to confine the agent"
                    ),
                    _ => format!("landlock_create_ruleset: {err}"),
                })
            }
        }
    }

    /// The ABI version, 0 when unavailable.
    pub fn abi(&self) -> u32 {
        match self {
            LandlockAvailability::Available(abi) => *abi,
            LandlockAvailability::Unavailable(_) => 0,
        }
    }

    /// Why Landlock is unavailable, if it is.
    pub fn unavailable(&self) -> Option<&str> {
        match self {
            LandlockAvailability::Available(_) => None,
            LandlockAvailability::Unavailable(why) => Some(why),
        }
    }
}

/// The running kernel's Landlock ABI version (0: not available).
pub fn kernel_landlock_abi() -> u32 {
    LandlockAvailability::probe().abi()
}

/// Read (and execute) everywhere, all rights under the directories `writable` (opened by the
/// caller) and on the [`DEVICE_RW`] paths that exist; scoped abstract Unix sockets and signals.
pub fn build_ruleset(writable: Vec<OwnedFd>) -> Result<RulesetCreated, landlock::RulesetError> {
    let all = AccessFs::from_all(LANDLOCK_ABI);
    let read = AccessFs::from_read(LANDLOCK_ABI);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)?
        .scope(Scope::from_all(LANDLOCK_ABI))?
        .create()?
        .add_rules(path_beneath_rules(["/"], read))?;
    for root in writable {
        ruleset = ruleset.add_rule(PathBeneath::new(root, all))?;
    }
    // `path_beneath_rules` skips paths it cannot open and narrows the rights to file rights
    // for the device files.
    Ok(ruleset
        .add_rules(path_beneath_rules(DEVICE_RW, all))?
        .no_new_privs(true))
}
