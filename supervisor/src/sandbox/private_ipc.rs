//! Private IPC for sandboxes that share the host's filesystem (the local engine): a fresh System
//! V IPC namespace and a fresh `/dev/shm` for every iteration.
//!
//! `/dev/shm` is world-writable and System V segments, queues and semaphores live as long as
//! their namespace: without their own, an agent leaves files, symlinks, POSIX and System V
//! shared memory that outlive the iteration and the sandbox, and that the host's processes and
//! other sandboxes see. The local engine starts the supervisor in its own mount and IPC
//! namespaces and asks for this module with `serve --private-ipc`: after every iteration's first
//! reap, when nothing of the agent runs any more, the supervisor moves itself into a new IPC
//! namespace (the agent's next tree is born in it; the old one, and everything in it, goes when
//! its last process is gone) and replaces the tmpfs on `/dev/shm` with a fresh one (detach the
//! old, mount a new: empty at any depth, in constant time, without walking what the agent left).
//!
//! Container engines give each container its own IPC namespace and `/dev/shm`, but they live as
//! long as the container, across iterations; renewing them needs `CAP_SYS_ADMIN`, which a
//! container sandbox does not get (and the flag is refused unless the supervisor is PID 1 of its
//! PID namespace, since unmounting `/dev/shm` in the host's mount namespace would take it from
//! the host). There [`sweep`] runs instead, at the same point: it removes what the agent's uid
//! left, the entries of `/dev/shm` it owns and the System V objects it owns or created.

use crate::bounded_tree;
use crate::result::IpcSweepRecord;
use std::ffi::CString;
use std::os::fd::AsFd as _;

/// What the supervisor does, after every first reap, with the IPC namespace and `/dev/shm`
/// the agent's last tree used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IpcReset {
    /// Nothing: they are not the sandbox's to reset (the host's, in degraded mode).
    #[default]
    None,
    /// A fresh IPC namespace and tmpfs ([`renew`]): `serve --private-ipc` (the local engine).
    Renew,
    /// Remove what the agent's uid left ([`sweep`]): `serve` as PID 1 of a container, whose
    /// namespace is its own for its whole life.
    Sweep,
}

/// Where the private tmpfs is mounted.
pub const SHM: &str = "/dev/shm";

/// The mount options: as container engines mount it (nosuid, nodev, noexec), world-writable
/// and sticky, 64 MiB at most.
const OPTIONS: &str = "mode=1777,size=64m";

/// Moves the calling process into a new IPC namespace and mounts a fresh, empty tmpfs on
/// [`SHM`], detaching whatever was mounted there.
pub fn renew() -> Result<(), String> {
    // SAFETY: unshare takes a flag word and touches no memory.
    if unsafe { libc::unshare(libc::CLONE_NEWIPC) } != 0 {
        return Err(format!(
            "private IPC: unshare(CLONE_NEWIPC): {}",
            std::io::Error::last_os_error()
        ));
    }
    let target = CString::new(SHM).map_err(|_| "shm path".to_string())?;
    let fstype = CString::new("tmpfs").map_err(|_| "fstype".to_string())?;
    let data = CString::new(OPTIONS).map_err(|_| "options".to_string())?;
    // SAFETY: umount2 and mount read NUL-terminated strings that live across the calls.
    unsafe {
        // EINVAL: nothing mounted there (a plain directory): fine, mount over it.
        if libc::umount2(target.as_ptr(), libc::MNT_DETACH) != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EINVAL) {
                return Err(format!("private /dev/shm: umount {SHM}: {err}"));
            }
        }
        if libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            data.as_ptr().cast(),
        ) != 0
        {
            return Err(format!(
                "private /dev/shm: mount tmpfs on {SHM}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// Where the POSIX message queues of the IPC namespace are listed (container engines mount the
/// namespace's `mqueue` file system here).
const MQUEUE: &str = "/dev/mqueue";

/// Removes the entries at the top of `dir` that `uid` owns (each at any depth, links not
/// followed); how many entries went. A missing `dir` has nothing to sweep.
fn sweep_dir(dir: &str, uid: u32) -> Result<u64, String> {
    let fd = match bounded_tree::open_dir(std::path::Path::new(dir)) {
        Ok(fd) => fd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(format!("ipc-sweep: open {dir}: {e}")),
    };
    let names =
        bounded_tree::entry_names(fd.as_fd()).map_err(|e| format!("ipc-sweep: read {dir}: {e}"))?;
    let mut removed = 0;
    for name in names {
        let owner = match rustix::fs::statat(&fd, &name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st.st_uid,
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => {
                return Err(format!(
                    "ipc-sweep: stat {dir}/{}: {e}",
                    name.to_string_lossy()
                ))
            }
        };
        if owner == uid {
            removed += bounded_tree::remove_at(fd.as_fd(), &name, dir)
                .map_err(|e| format!("ipc-sweep: {e}"))?;
        }
    }
    Ok(removed)
}

/// The System V object kinds: their `/proc/sysvipc` file and id column.
const SYSV: [(&str, &str); 3] = [("shm", "shmid"), ("sem", "semid"), ("msg", "msqid")];

/// Removes what `uid` (the agent's) left in this IPC namespace and `/dev/shm`, for sandboxes
/// without a private IPC namespace per iteration: every entry at the top of [`SHM`] and of
/// `/dev/mqueue` (POSIX shared memory and message queues) that `uid` owns, removed at any depth
/// without following links, and every System V segment, semaphore set and message queue whose
/// owner or creator is `uid`. Called when nothing of the agent runs
/// (after the first reap). System V objects can only be removed by their owner, creator or a
/// holder of `CAP_SYS_ADMIN`: the supervisor takes `uid` as its effective uid (this thread only)
/// for the removals and returns to root.
pub fn sweep(uid: u32) -> Result<IpcSweepRecord, String> {
    let mut swept = IpcSweepRecord::default();
    for dir in [SHM, MQUEUE] {
        swept.shm_entries += sweep_dir(dir, uid)?;
    }

    let mut doomed = Vec::new();
    for (kind, id_column) in SYSV {
        let path = format!("/proc/sysvipc/{kind}");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("ipc-sweep: {path}: {e}")),
        };
        doomed.extend(
            owned_ids(&text, id_column, uid)
                .into_iter()
                .map(|id| (kind, id)),
        );
    }
    if doomed.is_empty() {
        return Ok(swept);
    }
    as_euid(uid, || {
        for &(kind, id) in &doomed {
            // SAFETY: the *ctl calls take integers and a null buffer for IPC_RMID.
            let rc = unsafe {
                match kind {
                    "shm" => libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()),
                    "sem" => libc::semctl(id, 0, libc::IPC_RMID),
                    _ => libc::msgctl(id, libc::IPC_RMID, std::ptr::null_mut()),
                }
            };
            if rc == 0 {
                swept.sysv_objects += 1;
            } else {
                let err = std::io::Error::last_os_error();
                // EINVAL/EIDRM: gone since the listing.
                if !matches!(err.raw_os_error(), Some(libc::EINVAL | libc::EIDRM)) {
                    return Err(format!("ipc-sweep: remove System V {kind} {id}: {err}"));
                }
            }
        }
        Ok(())
    })?;
    Ok(swept)
}

/// The ids in a `/proc/sysvipc/<kind>` listing (header line first) whose `uid` or `cuid` is
/// `uid`.
fn owned_ids(listing: &str, id_column: &str, uid: u32) -> Vec<i32> {
    let mut lines = listing.lines();
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let columns: Vec<&str> = header.split_whitespace().collect();
    let at = |name: &str| columns.iter().position(|c| *c == name);
    let (Some(id_at), Some(uid_at), Some(cuid_at)) = (at(id_column), at("uid"), at("cuid")) else {
        return Vec::new();
    };
    lines
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
            let owned =
                field(uid_at) == Some(u64::from(uid)) || field(cuid_at) == Some(u64::from(uid));
            if owned {
                fields.get(id_at).and_then(|f| f.parse::<i32>().ok())
            } else {
                None
            }
        })
        .collect()
}

/// Runs `f` with `uid` as this thread's effective uid (real and saved stay root, so the way back
/// is open), then returns to effective uid 0. A failure to return is an error the caller must
/// treat as fatal to the iteration.
fn as_euid<T>(uid: u32, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    if nix::unistd::geteuid().as_raw() == uid {
        // The unprivileged mode: the supervisor is the agent's uid already.
        return f();
    }
    let keep = libc::c_long::from(-1i32);
    // SAFETY: setresuid takes integers; the raw syscall changes this thread only (the supervisor
    // is single-threaded here), without glibc's all-threads broadcast.
    if unsafe { libc::syscall(libc::SYS_setresuid, keep, libc::c_long::from(uid), keep) } != 0 {
        return Err(format!(
            "ipc-sweep: take effective uid {uid}: {}",
            std::io::Error::last_os_error()
        ));
    }
    let result = f();
    // SAFETY: as above; the saved uid is 0, so returning to effective uid 0 is allowed.
    if unsafe { libc::syscall(libc::SYS_setresuid, keep, 0 as libc::c_long, keep) } != 0 {
        return Err(format!(
            "ipc-sweep: return to effective uid 0: {}",
            std::io::Error::last_os_error()
        ));
    }
    result
}

#[cfg(test)]
mod tests {
    use super::owned_ids;

    #[test]
    fn the_agents_objects_are_found_by_owner_or_creator() {
        let shm = "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap\n\
                            0          3  1600                  4096    10    10      0 65534 65534 65534 65534          0          0 1700000000                     0                     0\n\
                   2120548352          4   600                  4096    11    11      0     0     0     0     0          0          0 1700000000                     0                     0\n\
                            0          7   600                  4096    12    12      0     0     0 65534 65534          0          0 1700000000                     0                     0\n";
        assert_eq!(owned_ids(shm, "shmid", 65534), [3, 7]);
        assert_eq!(owned_ids(shm, "shmid", 1000), Vec::<i32>::new());
        let sem = "       key      semid perms      nsems   uid   gid  cuid  cgid      otime      ctime\n\
                            0          9   600          1 65534 65534 65534 65534          0 1700000000\n";
        assert_eq!(owned_ids(sem, "semid", 65534), [9]);
        assert_eq!(owned_ids("", "msqid", 65534), Vec::<i32>::new());
        assert_eq!(
            owned_ids("garbage\n1 2 3\n", "msqid", 65534),
            Vec::<i32>::new()
        );
    }
}
