//! The trees offered uploads put in place, each with the listing it was offered with (a file of
//! `<records>/held/`, owner-only), so that a later offered upload to another destination can copy
//! content from them ([`OtherTree`], `unpack::offer::elsewhere`). The listings only say where to
//! look: whatever is copied from another tree is hashed first. Only the destinations, and each
//! listing file's length and SHA-256, are kept in memory.
//!
//! A host that names an offered listing by its digest (`upload.listing_digest`) is spared
//! sending it again when the supervisor holds exactly that listing for the destination
//! ([`HeldTrees::exactly`]): the file is read back and taken only when its length and SHA-256
//! are the ones recorded when it was written and the SHA-256 is the one the host named. What
//! the host claims is never taken on its word: the upload then checks the tree on disk against
//! the listing as if it had just arrived.

use super::records::create_private_dir;
use crate::unpack::offer::OtherTree;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// A listing file written for a destination: where, how long, and its SHA-256.
#[derive(Debug, Clone)]
pub(super) struct HeldFile {
    path: PathBuf,
    bytes: u64,
    sha256: [u8; 32],
}

/// A held listing read back: its bytes and their SHA-256.
pub(super) type HeldListing = (Vec<u8>, [u8; 32]);

/// The trees held, by destination.
#[derive(Debug)]
pub(super) struct HeldTrees {
    dir: PathBuf,
    trees: BTreeMap<PathBuf, HeldFile>,
    /// Numbers the staged listings: two uploads to one destination never share a file.
    staged: u64,
}

impl HeldTrees {
    /// None held yet; what an earlier supervisor left in `<records>/held` is removed (its trees
    /// may have changed since).
    pub(super) fn new(records: &Path) -> HeldTrees {
        let dir = records.join("held");
        let _ = std::fs::remove_dir_all(&dir);
        HeldTrees {
            dir,
            trees: BTreeMap::new(),
            staged: 0,
        }
    }

    /// Every destination held, with the SHA-256 of its listing (lowercase hex).
    pub(super) fn digests(&self) -> std::collections::BTreeMap<String, String> {
        self.trees
            .iter()
            .map(|(root, held)| (root.display().to_string(), hex::encode(held.sha256)))
            .collect()
    }

    /// Every tree held but `dest` and those inside it.
    pub(super) fn others(&self, dest: &Path) -> Vec<OtherTree> {
        self.trees
            .iter()
            .filter(|(root, _)| !root.starts_with(dest))
            .map(|(root, held)| OtherTree {
                root: root.clone(),
                listing: held.path.clone(),
            })
            .collect()
    }

    /// The file of `dest`'s listing, with `extension` (the path's components hashed: `/a/b/`
    /// is `/a/b`).
    fn file(&self, dest: &Path, extension: &str) -> PathBuf {
        let mut key = Sha256::new();
        for part in dest.components() {
            key.update(part.as_os_str().as_encoded_bytes());
            key.update([0]);
        }
        self.dir
            .join(format!("{}.{extension}", hex::encode(&key.finalize()[..8])))
    }

    /// Keeps `listing`, offered for `dest`, until the upload ends ([`HeldTrees::put`]); None
    /// when it could not be written (that only costs later uploads the reuse).
    pub(super) fn stage(&mut self, dest: &Path, listing: &[u8]) -> Option<HeldFile> {
        self.staged += 1;
        let path = self.file(dest, &format!("{}.pending", self.staged));
        let written = create_private_dir(&self.dir).and_then(|()| {
            let _ = std::fs::remove_file(&path);
            // A new file, never through a link left there.
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path)
                .and_then(|mut f| f.write_all(listing))
        });
        match written {
            Ok(()) => Some(HeldFile {
                path,
                bytes: listing.len() as u64,
                sha256: Sha256::digest(listing).into(),
            }),
            Err(e) => {
                tracing::warn!("upload: {}: listing not kept: {e}", dest.display());
                None
            }
        }
    }

    /// The upload to `dest` put its tree in place: `staged` is its listing now. A plain upload
    /// (`staged` None) leaves it without one. Trees inside `dest` are gone with it.
    pub(super) fn put(&mut self, dest: &Path, staged: Option<HeldFile>) {
        let inside: Vec<PathBuf> = self
            .trees
            .keys()
            .filter(|root| root.starts_with(dest))
            .cloned()
            .collect();
        for root in inside {
            if let Some(held) = self.trees.remove(&root) {
                let _ = std::fs::remove_file(held.path);
            }
        }
        if let Some(staged) = staged {
            let listing = self.file(dest, "listing");
            if std::fs::rename(&staged.path, &listing).is_ok() {
                self.trees.insert(
                    dest.to_path_buf(),
                    HeldFile {
                        path: listing,
                        ..staged
                    },
                );
            }
        }
    }

    /// The listing held for `dest`, read back and checked against what was recorded when it
    /// was written: `Ok(None)` when none is held, `Err` naming why the file is not believed.
    pub(super) fn verified(&self, dest: &Path) -> Result<Option<HeldListing>, String> {
        let Some(held) = self.trees.get(dest) else {
            return Ok(None);
        };
        let changed = |why: String| {
            format!(
                "the listing held for {} ({}) is not what was written: {why}",
                dest.display(),
                held.path.display()
            )
        };
        let mut bytes = Vec::with_capacity(usize::try_from(held.bytes).unwrap_or(0));
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(&held.path)
            .and_then(|f| f.take(held.bytes.saturating_add(1)).read_to_end(&mut bytes))
            .map_err(|e| changed(e.to_string()))?;
        if bytes.len() as u64 != held.bytes {
            return Err(changed(format!(
                "{} bytes, {} were written",
                bytes.len(),
                held.bytes
            )));
        }
        let sha256: [u8; 32] = Sha256::digest(&bytes).into();
        if sha256 != held.sha256 {
            return Err(changed("its SHA-256 differs".into()));
        }
        Ok(Some((bytes, sha256)))
    }

    /// The listing held for `dest` when its SHA-256 is `digest` (lowercase hex), checked as
    /// [`HeldTrees::verified`] does; otherwise why not (nothing held, another listing, a file
    /// that changed).
    pub(super) fn exactly(&self, dest: &Path, digest: &str) -> Result<Vec<u8>, String> {
        match self.trees.get(dest) {
            None => {
                return Err(format!(
                    "the supervisor holds no listing for {}",
                    dest.display()
                ))
            }
            Some(held) if hex::encode(held.sha256) != digest => {
                return Err(format!(
                    "the listing held for {} has SHA-256 {}, not {digest}",
                    dest.display(),
                    hex::encode(held.sha256)
                ))
            }
            Some(_) => {}
        }
        match self.verified(dest)? {
            Some((bytes, _)) => Ok(bytes),
            None => Err(format!(
                "the supervisor holds no listing for {}",
                dest.display()
            )),
        }
    }

    /// The upload ended without a tree in place: its staged listing goes.
    pub(super) fn discard(staged: Option<HeldFile>) {
        if let Some(staged) = staged {
            let _ = std::fs::remove_file(staged.path);
        }
    }
}
