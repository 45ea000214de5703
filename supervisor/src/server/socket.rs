//! The control socket: its private directory, binding it so it appears only once it accepts
//! connections, and accepting connections from the peers allowed to use it (root only).

use super::conn::Conn;
use super::error::RequestError;
use super::Server;
use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::Path;

/// Whether a peer with this uid may use the control socket (only root).
pub fn peer_allowed(uid: u32) -> Result<(), String> {
    if uid == 0 {
        Ok(())
    } else {
        Err(format!(
            "the control socket is for root only (peer uid {uid})"
        ))
    }
}

/// Creates the socket's parent directory 0700 root-owned, or checks an existing one is exactly
/// that (a directory, owned by us, mode 0700).
pub fn prepare_socket_dir(dir: &Path) -> Result<(), String> {
    match fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent() {
                fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
            }
            fs::DirBuilder::new()
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("{}: {e}", dir.display()))?;
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
                .map_err(|e| format!("{}: {e}", dir.display()))
        }
        Err(e) => Err(format!("{}: {e}", dir.display())),
        Ok(meta) => {
            let euid = nix::unistd::geteuid().as_raw();
            if !meta.is_dir() || meta.uid() != euid || meta.mode() & 0o7777 != 0o700 {
                Err(format!(
                    "control socket directory {} must be a directory owned by uid {euid} with mode 0700 (found {}, uid {}, mode {:o})",
                    dir.display(),
                    if meta.is_dir() { "a directory" } else { "not a directory" },
                    meta.uid(),
                    meta.mode() & 0o7777
                ))
            } else {
                Ok(())
            }
        }
    }
}

/// Binds the control socket at `socket` (0600, non-blocking) after preparing its directory; a
/// stale socket there is replaced, anything else is refused.
pub(super) fn bind(socket: &Path) -> Result<UnixListener, String> {
    let dir = socket
        .parent()
        .ok_or_else(|| format!("{}: no parent directory", socket.display()))?;
    prepare_socket_dir(dir)?;
    match fs::symlink_metadata(socket) {
        Ok(meta) if meta.file_type().is_socket() => {
            fs::remove_file(socket).map_err(|e| format!("{}: {e}", socket.display()))?
        }
        Ok(_) => return Err(format!("{} exists and is not a socket", socket.display())),
        Err(_) => {}
    }
    // Bind and listen under a temporary name, then rename: the socket appears at its path only
    // once it accepts connections (binding in place leaves a window between bind and listen in
    // which a client that saw the file gets ECONNREFUSED).
    let staging = dir.join(format!(".control.{}.sock", std::process::id()));
    let _ = fs::remove_file(&staging);
    let listener =
        UnixListener::bind(&staging).map_err(|e| format!("{}: {e}", staging.display()))?;
    let ready = fs::set_permissions(&staging, fs::Permissions::from_mode(0o600))
        .and_then(|()| listener.set_nonblocking(true))
        .and_then(|()| fs::rename(&staging, socket));
    if let Err(e) = ready {
        let _ = fs::remove_file(&staging);
        return Err(format!("{}: {e}", socket.display()));
    }
    Ok(listener)
}

impl Server {
    /// Accepts every pending connection; a peer other than root gets a `refused` error and is
    /// closed.
    pub(super) fn accept(&mut self) {
        let Some(listener) = &self.listener else {
            return;
        };
        loop {
            let stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    tracing::warn!("serve: accept: {e}");
                    return;
                }
            };
            let id = self.next_conn;
            self.next_conn += 1;
            let cred =
                nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials);
            let (uid, pid) = match cred {
                Ok(c) => (c.uid(), c.pid()),
                Err(err) => {
                    tracing::warn!("serve: SO_PEERCRED: {err}; connection refused");
                    continue;
                }
            };
            let write: Result<OwnedFd, _> = stream.try_clone().map(OwnedFd::from);
            let conn = write.and_then(|w| Conn::new(id, OwnedFd::from(stream), w, Some(pid)));
            let mut conn = match conn {
                Ok(conn) => conn,
                Err(err) => {
                    tracing::warn!("serve: connection setup: {err}");
                    continue;
                }
            };
            if let Err(why) = peer_allowed(uid) {
                tracing::warn!("serve: {why}; refused");
                conn.error(0, RequestError::Refused(why));
                continue;
            }
            tracing::debug!("conn {id}: accepted (pid {pid}, fd {})", conn.raw());
            self.conns.push(conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_root_peers_are_allowed() {
        assert!(peer_allowed(0).is_ok());
        let err = peer_allowed(65534).unwrap_err();
        assert!(err.contains("65534"), "{err}");
    }

    #[test]
    fn socket_dir_must_be_private() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        prepare_socket_dir(&dir).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        prepare_socket_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let err = prepare_socket_dir(&dir).unwrap_err();
        assert!(err.contains(&dir.display().to_string()), "{err}");
    }
}
