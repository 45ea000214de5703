//! Uploads: the `upload` request's destination checks, the listing of an offered tree and the
//! `need` answer ([`crate::unpack::offer`]), and the tar stream handed frame by frame to the
//! thread that unpacks it (`upload_stream`).

use super::conn::{Conn, Upload};
use super::error::RequestError;
use super::upload_stream::UploadStream;
use super::Server;
use crate::clock::millis;
use crate::protocol::{Channel, Frame, ListingDigest, Owner, Response};
use crate::unpack::offer::{delta, Assembly, MAX_LINE};
use crate::unpack::unpack_tar;
use serde_json::json;
use sha2::Digest as _;
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

/// An `upload` request's options.
pub(super) struct UploadAsk<'a> {
    /// Its destination, as sent.
    pub dest: &'a str,
    /// The tree's owner.
    pub owner: Option<Owner>,
    /// Offered: the listing first.
    pub offer: bool,
    /// The tar stream's compression.
    pub compression: Option<&'a str>,
    /// The listing named by digest (`upload.listing_digest`).
    pub named: Option<ListingDigest>,
}

/// The `send_listing` an upload that named its listing is answered with: the chunks of the
/// base, and why the named listing is not held.
type ListingWanted = (Vec<String>, String);

impl Server {
    /// Handles an `upload` request of connection `i`: checks the destination and gets ready for
    /// the frames that follow (the listing of an offered tree, or the tar stream). Once the
    /// request is refused (other than for order), those frames are discarded up to an empty one.
    pub(super) fn start_upload(
        &mut self,
        i: usize,
        id: u64,
        ask: UploadAsk<'_>,
    ) -> Result<(), RequestError> {
        let dest = ask.dest;
        if !matches!(self.conns[i].upload, Upload::Idle) {
            return Err(RequestError::Order(
                "an upload is already in progress on this connection".into(),
            ));
        }
        let conn_id = self.conns[i].id;
        match self.open_upload(conn_id, id, ask) {
            Ok((upload, ask)) => {
                self.conns[i].upload = upload;
                match ask {
                    // The listing named is held: as if it had just arrived.
                    None if matches!(
                        &self.conns[i].upload,
                        Upload::Offered { named: Some(_), .. }
                    ) =>
                    {
                        self.offer_listed(i)
                    }
                    None => {}
                    Some((chunks, reason)) => {
                        tracing::info!("upload: {dest}: listing asked for: {reason}");
                        self.conns[i].send(&Response::SendListing { id, chunks, reason });
                    }
                }
                Ok(())
            }
            Err(err) => {
                self.conns[i].upload = Upload::Draining;
                Err(err)
            }
        }
    }

    /// Refuses an upload while an iteration runs or is about to (a `run` accepted in the same
    /// read): a tree is never assembled or swapped under a live agent.
    fn check_no_iteration(&self) -> Result<(), RequestError> {
        if self.current.is_some() || self.pending_run.is_some() {
            return Err(RequestError::Busy("an iteration is running".into()));
        }
        Ok(())
    }

    /// The receiving state of upload `id` of connection `conn_id`, or why it is refused; with
    /// it, for an upload that named its listing, the `send_listing` to answer (the chunks of
    /// the base and why the named listing is not held), or `None` when the listing named is
    /// held (then the state already holds it).
    fn open_upload(
        &self,
        conn_id: u64,
        id: u64,
        ask: UploadAsk<'_>,
    ) -> Result<(Upload, Option<ListingWanted>), RequestError> {
        let UploadAsk {
            dest,
            owner,
            offer,
            compression,
            named,
        } = ask;
        // Refused here, not before: a refused upload's frames are drained, never taken for
        // frames out of order.
        self.check_claim(conn_id, "upload")?;
        self.check_no_iteration()?;
        let zstd = match compression {
            None => false,
            Some("zstd") => true,
            Some(other) => {
                return Err(RequestError::Refused(format!(
                    "compression {other:?} is not supported (zstd is)"
                )))
            }
        };
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
        let owner = owner.map(|o| (o.uid, o.gid));
        if named.is_some() && !offer {
            return Err(RequestError::Malformed(
                "upload: a listing is named only with offer".into(),
            ));
        }
        if offer {
            let mut upload = Upload::Offered {
                id,
                dest: dest.clone(),
                owner,
                zstd,
                listing: Vec::new(),
                lines: 0,
                named: None,
                base: None,
            };
            let Some(named) = named else {
                return Ok((upload, None));
            };
            self.check_named(&named)?;
            let (held, ask) = self.held_for(&dest, &named);
            if let Upload::Offered {
                listing,
                named: n,
                base,
                ..
            } = &mut upload
            {
                *n = Some(named);
                match held {
                    Held::Exactly(bytes) => *listing = bytes,
                    Held::Base(bytes) => {
                        let chunks = delta::chunks(&bytes);
                        *base = Some((bytes, chunks));
                    }
                    Held::Nothing => {}
                }
            }
            return Ok((upload, ask));
        }
        let limits = self.limits;
        let target = dest.clone();
        let stream = UploadStream::start(zstd, move |reader| {
            let reader = std::io::BufReader::with_capacity(256 * 1024, reader);
            unpack_tar(reader, &target, &limits, owner)
                .map(|r| json!({"files": r.files, "dirs": r.dirs, "bytes": r.bytes}))
        })?;
        Ok((
            Upload::Receiving {
                id,
                dest,
                stream,
                bytes: 0,
                started: Instant::now(),
                held: None,
            },
            None,
        ))
    }

    /// The most bytes an offered listing may have: 512 a line on average for the entry limit.
    fn max_listing(&self) -> u64 {
        self.limits
            .max_entries
            .saturating_mul(512)
            .saturating_add(1 << 20)
    }

    /// Refuses a named listing that could not be taken whatever the supervisor holds.
    fn check_named(&self, named: &ListingDigest) -> Result<(), RequestError> {
        if !crate::manifest::is_sha256_hex(&named.sha256) {
            return Err(RequestError::Malformed(format!(
                "upload: listing.sha256 {:?} is not 64 lowercase hex digits",
                named.sha256
            )));
        }
        let max = self.max_listing();
        if named.bytes > max || named.lines > self.limits.max_entries {
            return Err(RequestError::Refused(format!(
                "listing of {} lines and {} bytes: more than {} entries or {max} bytes",
                named.lines, named.bytes, self.limits.max_entries
            )));
        }
        Ok(())
    }

    /// What the supervisor holds for `dest` against the listing `named`: exactly it (checked
    /// against the record of the held file, never on the host's word), or a base for a delta
    /// (another listing held there), or nothing; with the `send_listing` to answer unless it is
    /// held exactly.
    fn held_for(&self, dest: &Path, named: &ListingDigest) -> (Held, Option<ListingWanted>) {
        match self.held.verified(dest) {
            Ok(Some((bytes, sha256)))
                if hex::encode(sha256) == named.sha256 && bytes.len() as u64 == named.bytes =>
            {
                (Held::Exactly(bytes), None)
            }
            Ok(Some((bytes, sha256))) => {
                let chunks = delta::chunk_digests(&bytes);
                let reason = format!(
                    "the listing held for {} is another one (SHA-256 {})",
                    dest.display(),
                    hex::encode(sha256)
                );
                (Held::Base(bytes), Some((chunks, reason)))
            }
            Ok(None) => (
                Held::Nothing,
                Some((
                    Vec::new(),
                    format!("the supervisor holds no listing for {}", dest.display()),
                )),
            ),
            Err(why) => {
                tracing::warn!("upload: {why}");
                (Held::Nothing, Some((Vec::new(), why)))
            }
        }
    }

    /// Handles a data frame of connection `i`: the listing of an offered upload (channel 4),
    /// then tar bytes (channel 3), unpacked as they arrive and answered at the empty frame that
    /// ends them; those of a refused upload are discarded.
    pub(super) fn on_data(&mut self, i: usize, frame: Frame) {
        let max_stream = self
            .limits
            .max_bytes
            .saturating_add(self.limits.max_entries.saturating_mul(1536))
            .saturating_add(1 << 20);
        let max_entries = self.limits.max_entries;
        // The listing is held in memory until it is complete: about 100 bytes a line in
        // practice, bounded at 512 a line on average (longer paths need a larger entry limit).
        let max_listing = self.max_listing();
        let c = &mut self.conns[i];
        let expected = match &c.upload {
            Upload::Offered { .. } => Some(Channel::Listing),
            Upload::Receiving { .. } => Some(Channel::Tar),
            Upload::Draining | Upload::Idle => None,
        };
        if !matches!(frame.channel, Channel::Tar | Channel::Listing)
            || expected.is_some_and(|want| want != frame.channel)
        {
            c.error(
                0,
                RequestError::Order(format!(
                    "the host may only send data frames on channel {} during an upload",
                    if expected == Some(Channel::Listing) {
                        "4 (the listing)"
                    } else {
                        "3"
                    }
                )),
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
            Upload::Offered {
                id, listing, lines, ..
            } => {
                let id = *id;
                if frame.payload.is_empty() {
                    self.offer_listed(i);
                    return;
                }
                listing.extend_from_slice(&frame.payload);
                *lines += frame.payload.iter().filter(|&&b| b == b'\n').count() as u64;
                let tail = listing.iter().rev().take_while(|&&b| b != b'\n').count();
                let refusal = if *lines > max_entries {
                    Some(format!("listing of more than {max_entries} entries"))
                } else if listing.len() as u64 > max_listing {
                    Some(format!(
                        "listing larger than {max_listing} bytes (512 a line on average for \
                         --upload-max-entries {max_entries})"
                    ))
                } else if tail > MAX_LINE {
                    Some(format!(
                        "listing line {} longer than {MAX_LINE} bytes",
                        *lines + 1
                    ))
                } else {
                    None
                };
                if let Some(why) = refusal {
                    c.upload = Upload::Draining;
                    c.error(id, RequestError::Refused(why));
                }
            }
            Upload::Receiving {
                id, stream, bytes, ..
            } => {
                let id = *id;
                if frame.payload.is_empty() {
                    if let Upload::Receiving {
                        id,
                        dest,
                        stream,
                        started,
                        held,
                        ..
                    } = std::mem::replace(&mut c.upload, Upload::Idle)
                    {
                        let offered = held.is_some();
                        if finish_stream(c, id, &dest, stream, started) {
                            self.held.put(&dest, held);
                            // A new workspace (or a tree holding it): the context files the
                            // run begins with are taken again after the next reap.
                            let workdir = self.manifest.as_ref().map(|m| Path::new(&m.workdir));
                            if workdir.is_none_or(|w| w.starts_with(&dest)) {
                                self.context_baseline = None;
                            }
                        } else if offered {
                            super::held::HeldTrees::discard(held);
                        }
                    }
                    return;
                }
                *bytes += frame.payload.len() as u64;
                let pushed = if *bytes > max_stream {
                    Err(RequestError::Refused(format!(
                        "upload larger than {max_stream} bytes of tar stream"
                    )))
                } else {
                    stream.push(frame.payload)
                };
                if let Err(err) = pushed {
                    // Dropping the stream ends the thread, which removes its staging tree.
                    c.upload = Upload::Draining;
                    c.error(id, err);
                }
            }
        }
    }

    /// The listing of connection `i`'s offered upload is complete: assembles what the sandbox
    /// has, answers `need`, and waits for the tar stream of the rest. A refused listing ends the
    /// upload (the host sends its tar stream only after `need`).
    fn offer_listed(&mut self, i: usize) {
        let Upload::Offered {
            id,
            dest,
            owner,
            zstd,
            listing,
            named,
            base,
            ..
        } = std::mem::replace(&mut self.conns[i].upload, Upload::Idle)
        else {
            return;
        };
        let started = Instant::now();
        let compact = named.is_some();
        let listing = match named {
            None => listing,
            Some(named) => match rebuilt(listing, base.as_ref(), &named) {
                Ok(listing) => listing,
                Err(why) => {
                    let c = &mut self.conns[i];
                    if base.is_none() {
                        c.error(id, RequestError::Refused(why));
                        return;
                    }
                    // The delta did not give the listing named: the whole listing, once.
                    tracing::info!(
                        "upload: {}: {why}: the whole listing asked for",
                        dest.display()
                    );
                    c.send(&Response::SendListing {
                        id,
                        chunks: Vec::new(),
                        reason: why,
                    });
                    c.upload = Upload::Offered {
                        id,
                        dest,
                        owner,
                        zstd,
                        listing: Vec::new(),
                        lines: 0,
                        named: Some(named),
                        base: None,
                    };
                    return;
                }
            },
        };
        if let Err(err) = self.check_no_iteration() {
            self.conns[i].error(id, err);
            return;
        }
        let others = self.held.others(&dest);
        let prepared = Assembly::prepare_with(&dest, &listing, &self.limits, owner, &others);
        let held = match &prepared {
            Ok(_) => self.held.stage(&dest, &listing),
            Err(_) => None,
        };
        drop(listing);
        let c = &mut self.conns[i];
        match prepared {
            Ok(assembly) => {
                let (files, bytes) = assembly.need();
                tracing::info!(
                    "upload: {}: {files} files ({bytes} bytes) needed, assembled in {} ms",
                    dest.display(),
                    millis(started.elapsed())
                );
                let mut bitmap = assembly.need_bitmap();
                if compact {
                    // A host that named its listing takes missing bytes for zeros.
                    let used = bitmap.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
                    bitmap = &bitmap[..used];
                }
                let need = hex::encode(bitmap);
                let mut assembly = assembly;
                let stream = UploadStream::start(zstd, move |reader| {
                    let reader = std::io::BufReader::with_capacity(256 * 1024, reader);
                    assembly.receive(reader)?;
                    let report = assembly.finish()?;
                    Ok(serde_json::to_value(report).unwrap_or_default())
                });
                match stream {
                    Ok(stream) => {
                        c.send(&Response::Need {
                            id,
                            files,
                            bytes,
                            need,
                        });
                        c.upload = Upload::Receiving {
                            id,
                            dest,
                            stream,
                            bytes: 0,
                            started: Instant::now(),
                            held,
                        };
                    }
                    Err(err) => {
                        super::held::HeldTrees::discard(held);
                        c.error(id, err)
                    }
                }
            }
            Err(err) => c.error(id, err.into()),
        }
    }
}

/// What the supervisor holds for an upload's destination against the listing it named.
enum Held {
    /// Exactly the listing named (its bytes).
    Exactly(Vec<u8>),
    /// Another listing: the base of a delta.
    Base(Vec<u8>),
    /// Nothing it can use.
    Nothing,
}

/// The listing an upload named, from what came on channel 4 (a recipe against `base`, or the
/// listing itself), or why it is not the one named.
fn rebuilt(
    received: Vec<u8>,
    base: Option<&(Vec<u8>, Vec<std::ops::Range<usize>>)>,
    named: &ListingDigest,
) -> Result<Vec<u8>, String> {
    let listing = match base {
        None => received,
        Some((held, chunks)) => delta::rebuild(&received, held, chunks, named.bytes)
            .map_err(|e| format!("the listing's delta: {e}"))?,
    };
    let sha256 = hex::encode(sha2::Sha256::digest(&listing));
    if listing.len() as u64 != named.bytes || sha256 != named.sha256 {
        return Err(format!(
            "the listing received ({} bytes, SHA-256 {sha256}) is not the one the upload named \
             ({} bytes, SHA-256 {})",
            listing.len(),
            named.bytes,
            named.sha256
        ));
    }
    Ok(listing)
}

/// Ends the tar stream of upload `id` on connection `c`: waits for its unpacking thread (which
/// swapped the tree in for `dest`, or refused it) and answers the request; true when the tree
/// is in place.
fn finish_stream(
    c: &mut Conn,
    id: u64,
    dest: &Path,
    stream: UploadStream,
    started: Instant,
) -> bool {
    match stream.finish() {
        Ok(counts) => {
            tracing::info!("upload: {}: {counts}", dest.display());
            let counts = match counts {
                serde_json::Value::Object(map) => map,
                _ => serde_json::Map::new(),
            };
            let detail = crate::protocol::detail::Uploaded {
                dest: Some(dest.display().to_string()),
                duration_ms: Some(millis(started.elapsed())),
                counts,
            };
            c.send(&Response::ok(id, &detail));
            true
        }
        Err(err) => {
            c.error(id, err);
            false
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
