//! The host's runtime directory out of the agent's reach, for sandboxes that share the host's
//! filesystem (the local engine) and have a network namespace of their own.
//!
//! A network namespace covers the network, abstract Unix sockets included, but not a socket
//! *file*: connecting to one is a filesystem operation, and Landlock (to ABI 7) does not govern
//! it. The host keeps its services' sockets under `/run`, many of them open to every uid: the
//! D-Bus system bus, `nscd` and systemd-resolved (which resolve names, so a lookup is a way to
//! send data out), a database's. With `serve --private-run` the supervisor mounts an empty,
//! read-only tmpfs on `/run` (and on `/var/run` where that is a directory of its own rather than
//! the usual link to `/run`) once, at start, in its own mount namespace, so the agent's tree
//! finds nothing there. The local engine asks for it whenever it made the sandbox's network
//! namespace (`network: none` or `allow`). A socket file elsewhere on the host (`/tmp`, a home
//! directory) stays reachable to a uid that may write it; containers do not share the host's
//! filesystem at all.

//!
//! A sandbox that has a network of its own (the local engine's sandbox started for
//! `network: open` and used again under `none` or `allow`) was not started so: when the agent
//! gets a network namespace of its own there, its child also gets a mount namespace of its own
//! with the same empty tmpfs on `/run` ([`AgentRun`]); the supervisor keeps its `/run`.

use std::ffi::CString;
use std::path::Path;

/// The directories hidden, in this order.
pub const RUN_DIRS: [&str; 2] = ["/run", "/var/run"];

/// The tmpfs's options: empty, root's, nothing to write in it.
const OPTIONS: &str = "mode=0755,size=16k";

/// The tmpfs's mount flags: read-only, nothing set-uid, no device, nothing to run.
const FLAGS: libc::c_ulong = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_RDONLY;

/// Mounts an empty read-only tmpfs on each of [`RUN_DIRS`] that is a directory (not a link to
/// another), unless a path of the supervisor's own (`keep`: its control socket, its records)
/// lies under it, which is refused: hiding it would cut the supervisor off. Returns the
/// directories hidden. Needs its own mount namespace (the caller checks it is PID 1 of one).
pub fn hide(keep: &[&Path]) -> Result<Vec<String>, String> {
    let dirs = to_hide(
        keep,
        "which the sandbox hides from the agent: give the sandbox a state directory elsewhere \
         (--state-dir)",
    )?;
    for dir in &dirs {
        mount_empty(dir)?;
    }
    Ok(dirs.iter().map(|d| d.to_string()).collect())
}

/// The directories of [`RUN_DIRS`] to hide: each one that is a directory (not a link to
/// another); refused when a path of `keep` lies under one, `why` saying what hiding it does.
fn to_hide(keep: &[&Path], why: &str) -> Result<Vec<&'static str>, String> {
    let mut dirs = Vec::new();
    for dir in RUN_DIRS {
        match std::fs::symlink_metadata(dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("private /run: {dir}: {e}")),
        }
        let real = std::fs::canonicalize(dir).map_err(|e| format!("private /run: {dir}: {e}"))?;
        for path in keep {
            let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
            if path.starts_with(&real) {
                return Err(format!(
                    "private /run: {} lies under {dir}, {why}",
                    path.display()
                ));
            }
        }
        dirs.push(dir);
    }
    Ok(dirs)
}

/// `/run` hidden for the agent alone: the directories and the mount's arguments, made before
/// the fork, so that the child only makes system calls ([`AgentRun::apply_in_child`]).
#[derive(Debug)]
pub struct AgentRun {
    dirs: Vec<CString>,
    names: Vec<String>,
    fstype: CString,
    data: CString,
}

impl AgentRun {
    /// The directories of [`RUN_DIRS`] to hide from the agent (each a directory, not a link to
    /// another); refused when a path the agent needs (`needed`: its workdir, directories,
    /// verified trees) lies under one of them.
    pub fn prepare(needed: &[&Path]) -> Result<AgentRun, String> {
        let names = to_hide(
            needed,
            "which the agent's own network namespace hides (the host's sockets are there)",
        )?;
        let dirs = names
            .iter()
            .map(|dir| CString::new(*dir).map_err(|_| format!("private /run: {dir}: NUL")))
            .collect::<Result<Vec<_>, _>>()?;
        let names = names.iter().map(|d| d.to_string()).collect();
        Ok(AgentRun {
            dirs,
            names,
            fstype: CString::new("tmpfs").map_err(|_| "fstype".to_string())?,
            data: CString::new(OPTIONS).map_err(|_| "options".to_string())?,
        })
    }

    /// The directories hidden, for the record.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// In the agent's child before exec, holding `CAP_SYS_ADMIN`: a mount namespace of its
    /// own, nothing of it propagated back, and an empty read-only tmpfs on each directory.
    /// `Err` is the errno of the call that failed.
    ///
    /// # Safety
    ///
    /// Only in the forked child before exec: it changes the calling process's mount namespace.
    /// It allocates nothing (the strings were made by [`AgentRun::prepare`]).
    pub unsafe fn apply_in_child(&self) -> Result<(), i32> {
        let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        // SAFETY: unshare and mount with NUL-terminated strings owned by `self`, or null.
        unsafe {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Err(errno());
            }
            let flags = libc::MS_REC | libc::MS_SLAVE;
            if libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                flags,
                std::ptr::null(),
            ) != 0
            {
                return Err(errno());
            }
            for dir in &self.dirs {
                if libc::mount(
                    self.fstype.as_ptr(),
                    dir.as_ptr(),
                    self.fstype.as_ptr(),
                    FLAGS,
                    self.data.as_ptr().cast(),
                ) != 0
                {
                    return Err(errno());
                }
            }
        }
        Ok(())
    }
}

fn mount_empty(dir: &str) -> Result<(), String> {
    let target = CString::new(dir).map_err(|_| format!("private /run: {dir}: NUL"))?;
    let fstype = CString::new("tmpfs").map_err(|_| "fstype".to_string())?;
    let data = CString::new(OPTIONS).map_err(|_| "options".to_string())?;
    // SAFETY: mount reads NUL-terminated strings that live across the call.
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            FLAGS,
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(format!(
            "private /run: mount tmpfs on {dir}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Only the refusal is tested here: a mount would cover the test machine's own /run (the
    // mount is tested end to end, in the sandbox's namespace, by the egress tests).
    #[test]
    fn a_supervisor_path_under_run_is_refused_before_anything_is_mounted() {
        let err = hide(&[Path::new("/run/pitcrew-test/sandboxes/x/run/control.sock")]).unwrap_err();
        assert!(err.contains("lies under /run"), "{err}");
        assert!(err.contains("--state-dir"), "{err}");
    }
}
