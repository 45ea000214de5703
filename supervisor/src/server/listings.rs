//! The manifest's per-file listings on disk: `set_manifest` moves the listings it carries to
//! files of the records directory (`listings/tree-N.jsonl`, root-only), or, with
//! `listings_follow`, expects them in `add_listing` requests of bounded size, which are
//! appended as they come. Between iterations the supervisor then holds a tree's digest, not its
//! paths: memory does not grow with the number of listed files, and a listing is not bound by
//! the control frame's 32 MiB. A drift report reads the file back (`StoredListing::load`).

use super::error::RequestError;
use super::records::create_private_dir;
use super::Server;
use crate::manifest::{FileListing, ListingWriter, Manifest};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;

/// The listings still arriving in `add_listing` requests, by tree index.
pub(super) type PendingListings = BTreeMap<usize, ListingWriter>;

/// The tree `name` an `add_listing` may still append to: its index in the manifest, the
/// manifest, and the tree's listing writer. `order` without a `set_manifest` that awaits
/// listings or once the tree's listing is complete; `refused` for a tree the manifest does not
/// name.
fn awaited<'m, 'p>(
    manifest: &'m mut Option<Manifest>,
    pending: &'p mut PendingListings,
    name: &str,
) -> Result<(usize, &'m mut Manifest, &'p mut ListingWriter), RequestError> {
    let Some(manifest) = manifest.as_mut() else {
        return Err(RequestError::Order(
            "add_listing needs a set_manifest with listings_follow first".into(),
        ));
    };
    let Some(index) = manifest.trees.iter().position(|t| t.name == name) else {
        return Err(RequestError::Refused(format!(
            "add_listing: the manifest has no tree {name:?}"
        )));
    };
    let Some(writer) = pending.get_mut(&index) else {
        return Err(RequestError::Order(format!(
            "add_listing: the listing of tree {name:?} is not awaited (complete, or given in the \
             manifest)"
        )));
    };
    Ok((index, manifest, writer))
}

impl Server {
    fn listings_dir(&self) -> PathBuf {
        self.records.join("listings")
    }

    /// Takes the listings out of `manifest` (a new `set_manifest`): each tree's listing goes to
    /// a fresh file, and with `follow` (`listings_follow`) each tree gets an empty file that
    /// `add_listing` fills.
    pub(super) fn store_listings(
        &mut self,
        manifest: &mut Manifest,
        follow: bool,
    ) -> Result<(), RequestError> {
        let dir = self.listings_dir();
        let internal = |e: std::io::Error| {
            RequestError::Internal(format!("listings directory {}: {e}", dir.display()))
        };
        self.pending_listings.clear();
        // Unprivileged, the agent's uid owns the records directory, and Landlock does not stop
        // a chmod: its owner's rights first, or a `chmod 000` would refuse every later manifest.
        // (Run as root the directory is root's 0700: nothing of the agent's reaches it.)
        if let Ok(meta) = std::fs::symlink_metadata(&dir) {
            if meta.is_dir() {
                let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
            }
        }
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(internal(e)),
            _ => {}
        }
        if manifest.trees.is_empty() {
            return Ok(());
        }
        create_private_dir(&dir).map_err(internal)?;
        for (index, tree) in manifest.trees.iter_mut().enumerate() {
            if follow && (!tree.files.is_empty() || !tree.dirs.is_empty()) {
                return Err(RequestError::Malformed(format!(
                    "trees[{index}] ({}): with listings_follow its files and dirs come in \
                     add_listing requests, not in the manifest",
                    tree.name
                )));
            }
            let path = dir.join(format!("tree-{index}.jsonl"));
            let mut writer = ListingWriter::create(&path).map_err(internal)?;
            if follow {
                self.pending_listings.insert(index, writer);
                continue;
            }
            let files = std::mem::take(&mut tree.files);
            let dirs = std::mem::take(&mut tree.dirs);
            writer.append(files.records(), &dirs).map_err(internal)?;
            tree.stored = Some(writer.finish().map_err(internal)?);
        }
        Ok(())
    }

    /// Appends part of tree `name`'s listing (`add_listing`); `last` completes it.
    pub(super) fn add_listing(
        &mut self,
        name: &str,
        files: &FileListing,
        dirs: &[String],
        last: bool,
    ) -> Result<crate::protocol::detail::ListingAdded, RequestError> {
        let (index, manifest, writer) =
            awaited(&mut self.manifest, &mut self.pending_listings, name)?;
        let internal =
            |e: std::io::Error| RequestError::Internal(format!("listing of tree {name:?}: {e}"));
        writer.append(files.records(), dirs).map_err(internal)?;
        let (files, dirs) = writer.counts();
        if last {
            if let Some(writer) = self.pending_listings.remove(&index) {
                manifest.trees[index].stored = Some(writer.finish().map_err(internal)?);
            }
        }
        Ok(crate::protocol::detail::ListingAdded {
            complete: last,
            dirs,
            files,
            held: false,
            tree: name.to_string(),
        })
    }

    /// Completes tree `name`'s listing from the offered listing held for its `path`, which must
    /// have SHA-256 `digest` (`add_listing` with `held_listing`): the held file is read back and
    /// checked against its record, and the listing derived from it must give the tree's digest
    /// in its format, so it is exactly the listing the host would have sent.
    pub(super) fn add_held_listing(
        &mut self,
        name: &str,
        digest: &str,
    ) -> Result<crate::protocol::detail::ListingAdded, RequestError> {
        let (index, manifest, writer) =
            awaited(&mut self.manifest, &mut self.pending_listings, name)?;
        if writer.counts() != (0, 0) {
            return Err(RequestError::Order(format!(
                "add_listing: tree {name:?} already has parts: a held listing is the whole listing"
            )));
        }
        let tree = &manifest.trees[index];
        let refused = |why: String| {
            RequestError::Refused(format!("add_listing: tree {name:?}: held_listing: {why}"))
        };
        let held = self
            .held
            .exactly(std::path::Path::new(&tree.path), digest)
            .map_err(refused)?;
        let listing = crate::unpack::offer::manifest_listing(&held, &self.limits)
            .map_err(|e| refused(e.to_string()))?;
        let got = listing.digest(tree.format);
        if got != tree.sha256 {
            return Err(refused(format!(
                "the held listing gives {} {got}, not the tree's {}",
                tree.format, tree.sha256
            )));
        }
        let internal =
            |e: std::io::Error| RequestError::Internal(format!("listing of tree {name:?}: {e}"));
        writer
            .append(listing.files, &listing.dirs)
            .map_err(internal)?;
        let (files, dirs) = writer.counts();
        if let Some(writer) = self.pending_listings.remove(&index) {
            manifest.trees[index].stored = Some(writer.finish().map_err(internal)?);
        }
        Ok(crate::protocol::detail::ListingAdded {
            complete: true,
            dirs,
            files,
            held: true,
            tree: name.to_string(),
        })
    }

    /// Refuses a `run` while a tree's listing is still arriving: a drift would be explained
    /// against part of it.
    pub(super) fn check_listings_complete(&self) -> Result<(), RequestError> {
        let (Some(index), Some(manifest)) =
            (self.pending_listings.keys().next(), self.manifest.as_ref())
        else {
            return Ok(());
        };
        let name = manifest.trees.get(*index).map_or("", |t| t.name.as_str());
        Err(RequestError::Order(format!(
            "run: the listing of tree {name:?} is incomplete (its last add_listing has not come)"
        )))
    }
}
