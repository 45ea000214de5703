//! Uploads: the `upload` request's destination checks, the tar stream spooled from data frames
//! into an unlinked root-owned file, and its unpacking once the stream ends.

use super::conn::Upload;
use super::error::RequestError;
use super::Server;
use crate::clock::millis;
use crate::protocol::{Channel, Frame, Owner, Response};
use crate::unpack::{unpack_tar, UnpackError};
use serde_json::json;
use std::fs::{self, File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};
use std::time::Instant;

/// Checks an upload destination: absolute, UTF-8 by construction, no `.`/`..`, not `/`.
fn check_dest(dest: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(dest);
    if !path.is_absolute() {
        return Err(format!("dest {dest:?} must be an absolute path"));
    }
    if path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(format!("dest {dest:?} must not contain `.` or `..`"));
    }
    if path.parent().is_none() {
        return Err("dest must not be /".to_string());
    }
    if dest.contains(['\n', '\r', '\\', '\0']) {
        return Err(format!("dest {dest:?} contains a refused character"));
    }
    Ok(path)
}

impl Server {
    /// Handles an `upload` request of connection `i`: checks the destination and opens the
    /// spool for the tar frames that follow. Once the request is refused (other than for
    /// order), those frames are discarded up to the empty one.
    pub(super) fn start_upload(
        &mut self,
        i: usize,
        id: u64,
        dest: &str,
        owner: Option<Owner>,
    ) -> Result<(), RequestError> {
        if !matches!(self.conns[i].upload, Upload::Idle) {
            return Err(RequestError::Order(
                "an upload is already in progress on this connection".into(),
            ));
        }
        match self.open_upload(self.conns[i].id, id, dest, owner) {
            Ok(upload) => {
                self.conns[i].upload = upload;
                Ok(())
            }
            Err(err) => {
                self.conns[i].upload = Upload::Draining;
                Err(err)
            }
        }
    }

    /// The receiving state of upload `id` of connection `conn_id`, or why it is refused.
    fn open_upload(
        &self,
        conn_id: u64,
        id: u64,
        dest: &str,
        owner: Option<Owner>,
    ) -> Result<Upload, RequestError> {
        // Refused here, not before: a refused upload's tar stream is drained, never taken for
        // frames out of order.
        self.check_claim(conn_id, "upload")?;
        if self.current.is_some() {
            return Err(RequestError::Busy("an iteration is running".into()));
        }
        let dest = check_dest(dest).map_err(RequestError::Refused)?;
        let inside = |root: &Path| dest.starts_with(root) || root.starts_with(&dest);
        if inside(&self.records)
            || self
                .socket
                .as_ref()
                .and_then(|s| s.parent())
                .is_some_and(inside)
        {
            return Err(RequestError::Refused(format!(
                "dest {} overlaps the supervisor's own directories",
                dest.display()
            )));
        }
        let spool_path = self.records.join(format!(".upload-{conn_id}-{id}"));
        let spool = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&spool_path)
            .map_err(|err| RequestError::Internal(format!("upload spool: {err}")))?;
        let _ = fs::remove_file(&spool_path);
        Ok(Upload::Receiving {
            id,
            dest,
            owner: owner.map(|o| (o.uid, o.gid)),
            spool,
            bytes: 0,
        })
    }

    /// Handles a data frame of connection `i`: spools tar bytes of the upload in progress,
    /// unpacks at the empty frame that ends it, discards those of a refused one.
    pub(super) fn on_data(&mut self, i: usize, frame: Frame) {
        let max_spool = self
            .limits
            .max_bytes
            .saturating_add(self.limits.max_entries.saturating_mul(1536))
            .saturating_add(1 << 20);
        let c = &mut self.conns[i];
        if frame.channel != Channel::Tar {
            c.error(
                0,
                RequestError::Order(
                    "the host may only send data frames on channel 3 during an upload".into(),
                ),
            );
            return;
        }
        match &mut c.upload {
            Upload::Idle => c.error(
                0,
                RequestError::Order("data frame without an upload in progress".into()),
            ),
            Upload::Draining => {
                if frame.payload.is_empty() {
                    c.upload = Upload::Idle;
                }
            }
            Upload::Receiving {
                id, spool, bytes, ..
            } => {
                let id = *id;
                if frame.payload.is_empty() {
                    let upload = std::mem::replace(&mut c.upload, Upload::Idle);
                    if let Upload::Receiving {
                        id,
                        dest,
                        owner,
                        spool,
                        ..
                    } = upload
                    {
                        self.finish_upload(i, id, &dest, owner, spool);
                    }
                    return;
                }
                *bytes += frame.payload.len() as u64;
                if *bytes > max_spool {
                    c.upload = Upload::Draining;
                    c.error(
                        id,
                        RequestError::Refused(format!(
                            "upload larger than {max_spool} bytes of tar stream"
                        )),
                    );
                    return;
                }
                if let Err(err) = spool.write_all(&frame.payload) {
                    c.upload = Upload::Draining;
                    c.error(id, RequestError::Internal(format!("upload spool: {err}")));
                }
            }
        }
    }

    /// Unpacks the spooled tar stream of upload `id` into `dest` and answers the request.
    fn finish_upload(
        &mut self,
        i: usize,
        id: u64,
        dest: &Path,
        owner: Option<(u32, u32)>,
        mut spool: File,
    ) {
        let started = Instant::now();
        let result = spool
            .seek(SeekFrom::Start(0))
            .map_err(|e| UnpackError::Io("upload spool".into(), e))
            .and_then(|_| {
                unpack_tar(
                    std::io::BufReader::with_capacity(256 * 1024, spool),
                    dest,
                    &self.limits,
                    owner,
                )
            });
        let c = &mut self.conns[i];
        match result {
            Ok(report) => {
                tracing::info!(
                    "upload: {} ({} files, {} bytes)",
                    dest.display(),
                    report.files,
                    report.bytes
                );
                c.send(&Response::Ok {
                    id,
                    detail: json!({
                        "dest": dest,
                        "files": report.files,
                        "dirs": report.dirs,
                        "bytes": report.bytes,
                        "duration_ms": millis(started.elapsed()),
                    }),
                });
            }
            Err(err) => c.error(id, err.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_are_checked() {
        assert!(check_dest("/opt/plugins/a").is_ok());
        assert!(check_dest("relative").is_err());
        assert!(check_dest("/opt/../etc").is_err());
        assert!(check_dest("/").is_err());
    }
}
