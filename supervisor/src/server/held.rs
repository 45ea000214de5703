//! The trees offered uploads put in place, each with the listing it was offered with (a file of
//! `<records>/held/`, owner-only), so that a later offered upload to another destination can copy
//! content from them ([`OtherTree`], `unpack::offer::elsewhere`). The listings only say where to
//! look: whatever is copied from another tree is hashed first. Only the destinations are kept
//! in memory.

use super::records::create_private_dir;
use crate::unpack::offer::OtherTree;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// The trees held, by destination.
#[derive(Debug)]
pub(super) struct HeldTrees {
    dir: PathBuf,
    trees: BTreeMap<PathBuf, PathBuf>,
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

    /// Every tree held but `dest` and those inside it.
    pub(super) fn others(&self, dest: &Path) -> Vec<OtherTree> {
        self.trees
            .iter()
            .filter(|(root, _)| !root.starts_with(dest))
            .map(|(root, listing)| OtherTree {
                root: root.clone(),
                listing: listing.clone(),
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
    pub(super) fn stage(&mut self, dest: &Path, listing: &[u8]) -> Option<PathBuf> {
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
            Ok(()) => Some(path),
            Err(e) => {
                tracing::warn!("upload: {}: listing not kept: {e}", dest.display());
                None
            }
        }
    }

    /// The upload to `dest` put its tree in place: `staged` is its listing now. A plain upload
    /// (`staged` None) leaves it without one. Trees inside `dest` are gone with it.
    pub(super) fn put(&mut self, dest: &Path, staged: Option<PathBuf>) {
        let inside: Vec<PathBuf> = self
            .trees
            .keys()
            .filter(|root| root.starts_with(dest))
            .cloned()
            .collect();
        for root in inside {
            if let Some(listing) = self.trees.remove(&root) {
                let _ = std::fs::remove_file(listing);
            }
        }
        if let Some(staged) = staged {
            let listing = self.file(dest, "listing");
            if std::fs::rename(&staged, &listing).is_ok() {
                self.trees.insert(dest.to_path_buf(), listing);
            }
        }
    }

    /// The upload ended without a tree in place: its staged listing goes.
    pub(super) fn discard(staged: Option<PathBuf>) {
        if let Some(staged) = staged {
            let _ = std::fs::remove_file(staged);
        }
    }
}
