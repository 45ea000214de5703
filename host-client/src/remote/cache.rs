//! The content-addressed cache of fetched remote sources:
//!
//! ```text
//! <cache>/sha256/<pin>/tree/content/          a directory, hashing (content-v1) to <pin>
//! <cache>/sha256/<pin>/tree/origins/<u>.json  where it was fetched from: one per URL (<u>: the
//!                                             URL's SHA-256): url, ref, path, commit, files
//! <cache>/sha256/<pin>/blob/content           a file, hashing (sha256) to <pin>
//! <cache>/sha256/<pin>/blob/origins/<u>.json
//! <cache>/tmp/fetch-*/                        fetches in progress
//! ```
//!
//! A directory and a file are kept apart under one pin: a file whose bytes are a directory's
//! `content-v1` listing has that directory's pin, and neither may displace the other. The
//! content is shared by every URL that holds it; each URL has an origin of its own, so two
//! harnesses pinning the same content from two places never displace each other's record.
//!
//! The cache must be the user's own, and so must the way to it ([`trusted_root`]): its root a
//! directory (not a link) owned by the user and writable by nobody else, and every directory
//! from `/` down to it owned by root or the user and writable by nobody else, unless it has the
//! sticky bit (`/tmp`: others may add names there, but not replace the user's). A link above
//! the root is followed when it is root's or the user's (it sits in a directory already found
//! trustworthy, so only they could have put it there) and the path it names is checked the same
//! way; `/var/cache -> /data/cache` works, a cache reached through another user's directory or
//! link does not. A refused root is never used, and said as such, naming the component and what
//! is wrong with it ([`Lookup::Untrusted`]). Nothing below the root is followed through a
//! symlink: a link where a directory, the content or an origin belongs is refused by a lookup
//! and removed (never followed) by a store. An entry is re-hashed on every use
//! ([`Cache::lookup`]): a copy changed on disk is never used, only reported (and replaced by the
//! next fetch). A store never replaces content that verifies, so a lookup running beside a
//! store sees either nothing or a verified copy.

use pitcrew_core::harness::{RemoteKind, RemoteSource};
use pitcrew_core::tree_hash::{self, TreeFormat, TreeListing};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::io::Read as _;
use std::os::unix::fs::{
    DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _,
};
use std::path::{Component, Path, PathBuf};

/// Where a copy came from and what it held: a cache entry's origin for one URL, and an entry
/// of the lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Origin {
    /// The URL without its pin.
    pub url: String,
    /// `tree` or `blob`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The pin.
    pub sha256: String,
    /// The ref the URL named.
    #[serde(rename = "ref")]
    pub ref_name: String,
    /// The path inside the repository.
    pub path: String,
    /// The commit the ref pointed at when fetched.
    pub commit: String,
    /// When it was fetched (UTC, RFC 3339).
    pub fetched_at: String,
    /// Every file (for a tree) with its SHA-256, sorted by path.
    pub files: Vec<CachedFile>,
}

/// One file of a cached tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CachedFile {
    /// Relative path.
    pub path: String,
    /// SHA-256 of its bytes.
    pub sha256: String,
}

/// What a cache lookup found.
#[derive(Debug)]
pub enum Lookup {
    /// A verified copy fetched for this URL: the path to use, where it came from, and (for a
    /// tree) the listing it was verified with.
    Hit(PathBuf, Box<Origin>, Option<TreeListing>),
    /// No copy under the pin, or none fetched for this URL.
    Missing,
    /// A copy or origin that is not what it must be (changed on disk, a link, unreadable).
    Tampered(String),
    /// The cache's root cannot be trusted ([`trusted_root`]): nothing in it is used.
    Untrusted(String),
}

/// The cache rooted at a directory.
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
}

/// What a content path holds.
enum Content {
    /// Nothing there.
    Missing,
    /// A copy that hashes to the pin, with a tree's listing.
    Verified(Option<TreeListing>),
    /// Something else, and why.
    Bad(String),
}

impl Cache {
    /// The cache at `root` (created on first store).
    pub fn new(root: PathBuf) -> Cache {
        Cache { root }
    }

    /// Its root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of the entry of `kind` pinned `sha256`.
    pub fn entry_dir(&self, sha256: &str, kind: RemoteKind) -> PathBuf {
        self.root.join("sha256").join(sha256).join(kind.as_str())
    }

    /// The origin file of `url` in the entry `dir`.
    fn origin_path(dir: &Path, url: &str) -> PathBuf {
        dir.join("origins").join(format!(
            "{}.json",
            hex::encode(Sha256::digest(url.as_bytes()))
        ))
    }

    /// Whether the root exists, refusing it ([`trusted_root`]) with the cache named and what to
    /// do.
    fn root_exists(&self) -> Result<bool, String> {
        let uid = rustix::process::geteuid().as_raw();
        trusted_root(&self.root, uid).map_err(|why| {
            format!(
                "the cache {} is not used: {why}; fix that, or set PITCREW_CACHE_DIR to a \
                 directory of your own",
                self.root.display()
            )
        })
    }

    /// Refuses a root that is missing or cannot be trusted ([`Cache::root_exists`]).
    fn check_root(&self) -> Result<(), String> {
        match self.root_exists()? {
            true => Ok(()),
            false => Err(format!("the cache {}: not found", self.root.display())),
        }
    }

    /// The verified copy of `source` fetched for its URL, re-hashed now.
    pub fn lookup(&self, source: &RemoteSource) -> Lookup {
        match self.root_exists() {
            Ok(true) => {}
            Ok(false) => return Lookup::Missing,
            Err(why) => return Lookup::Untrusted(why),
        }
        let dir = self.entry_dir(&source.sha256, source.kind);
        match no_links(&self.root, &dir) {
            Ok(true) => {}
            Ok(false) => return Lookup::Missing,
            Err(why) => return Lookup::Tampered(why),
        }
        let path = dir.join("content");
        let listing = match verify(&path, source.kind, &source.sha256) {
            Content::Verified(listing) => listing,
            Content::Missing => return Lookup::Missing,
            Content::Bad(why) => return Lookup::Tampered(why),
        };
        let origin_path = Self::origin_path(&dir, &source.url);
        let origin = match read_nofollow(&origin_path) {
            Ok(None) => return Lookup::Missing,
            Ok(Some(bytes)) => match serde_json::from_slice::<Origin>(&bytes) {
                Ok(origin) => origin,
                Err(e) => return Lookup::Tampered(format!("{}: {e}", origin_path.display())),
            },
            Err(why) => return Lookup::Tampered(why),
        };
        if origin.url != source.url
            || origin.kind != source.kind.as_str()
            || origin.sha256 != source.sha256
        {
            return Lookup::Tampered(format!(
                "{} is the origin of {} ({}, sha256={}), not of this entry",
                origin_path.display(),
                origin.url,
                origin.kind,
                origin.sha256
            ));
        }
        Lookup::Hit(path, Box::new(origin), listing)
    }

    /// A fresh, private staging directory for one fetch, below `<cache>/tmp/` (the cache's
    /// root created, owner-only, if it does not exist yet).
    pub fn staging(&self) -> Result<tempfile::TempDir, String> {
        let at = |e: std::io::Error| format!("{}: {e}", self.root.display());
        // What exists of the way is checked before anything is created along it.
        self.root_exists()?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.root)
            .map_err(at)?;
        self.check_root()?;
        let tmp = self.root.join("tmp");
        make_dir(&self.root, &tmp)?;
        tempfile::Builder::new()
            .prefix("fetch-")
            .tempdir_in(&tmp)
            .map_err(|e| format!("{}: {e}", tmp.display()))
    }

    /// Puts a verified fetch in place: `staging/content` (the directory or the file) becomes
    /// the entry's content unless a copy that verifies is there already (kept: it is the same
    /// content, and a lookup beside this store may be reading it); anything else there is
    /// removed first, a link included (never followed). Then `origin` is written for its URL
    /// (a temporary file renamed over the old one). Returns the entry's content path.
    pub fn store(
        &self,
        staging: tempfile::TempDir,
        kind: RemoteKind,
        origin: &Origin,
    ) -> Result<PathBuf, String> {
        self.check_root()?;
        let dir = self.entry_dir(&origin.sha256, kind);
        for d in [
            self.root.join("sha256"),
            self.root.join("sha256").join(&origin.sha256),
            dir.clone(),
            dir.join("origins"),
        ] {
            make_dir(&self.root, &d)?;
        }
        let content = dir.join("content");
        let staged = staging.path().join("content");
        let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
        match verify(&content, kind, &origin.sha256) {
            Content::Verified(_) => {}
            found => {
                if let Content::Bad(_) = found {
                    remove_nofollow(&content).map_err(|e| io(&content, e))?;
                }
                if let Err(e) = std::fs::rename(&staged, &content) {
                    // Another store beside this one put the same content in place first.
                    if !matches!(verify(&content, kind, &origin.sha256), Content::Verified(_)) {
                        return Err(io(&content, e));
                    }
                }
            }
        }
        let json = serde_json::to_vec_pretty(origin).map_err(|e| e.to_string())?;
        let target = Self::origin_path(&dir, &origin.url);
        pitcrew_core::atomic_file::write(&target, &json, 0o600).map_err(|e| e.to_string())?;
        Ok(content)
    }

    /// Removes fetch directories left in `<cache>/tmp/` by a `pitcrew lock` that was killed,
    /// once they are older than `age` (younger ones may be another lock's, still running).
    pub fn sweep_staging(&self, age: std::time::Duration) {
        if self.check_root().is_err() {
            return;
        }
        let Ok(entries) = std::fs::read_dir(self.root.join("tmp")) else {
            return;
        };
        for entry in entries.flatten() {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|elapsed| elapsed > age);
            if old && entry.file_name().to_string_lossy().starts_with("fetch-") {
                let _ = remove_nofollow(&entry.path());
            }
        }
    }
}

/// The most links followed on the way to the cache's root (the kernel's own bound).
const MAX_LINKS: usize = 40;

/// Whether the cache's root `root` exists (`false`: some component of it is missing), every
/// component of the way from `/` to it checked as it is reached, without following anything
/// not yet checked: each one must belong to root or to `uid`; a directory above the root must
/// be writable by nobody else unless it has the sticky bit (whose other users may add names but
/// not replace the next component, which is root's or `uid`'s); a link above the root is
/// followed (it sits in a directory only root or `uid` may change), and the path it names is
/// checked the same way; the root itself must be a directory of `uid` writable by nobody else,
/// never a link. `Err` names the component and what is wrong with it.
pub(super) fn trusted_root(root: &Path, uid: u32) -> Result<bool, String> {
    let absolute = if root.is_absolute() {
        root.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| format!("the current directory: {e}"))?
            .join(root)
    };
    let mut todo: std::collections::VecDeque<std::ffi::OsString> = absolute
        .components()
        .filter(|c| !matches!(c, Component::RootDir | Component::CurDir))
        .map(|c| c.as_os_str().to_os_string())
        .collect();
    let mut at = PathBuf::from("/");
    let top = lstat(&at)?.ok_or("/ is missing")?;
    check_owner(&at, &top, uid)?;
    if todo.is_empty() {
        check_root_dir(&at, &top, uid)?;
        return Ok(true);
    }
    check_above(&at, &top)?;
    let mut links = 0;
    while let Some(name) = todo.pop_front() {
        if name == ".." {
            if todo.is_empty() {
                return Err(format!(
                    "{} ends in '..': name the cache's directory itself",
                    root.display()
                ));
            }
            // `at` holds no link: its parent is the real one.
            at.pop();
            continue;
        }
        let next = at.join(&name);
        let Some(meta) = lstat(&next)? else {
            return Ok(false);
        };
        let last = todo.is_empty();
        check_owner(&next, &meta, uid)?;
        if meta.file_type().is_symlink() {
            let target =
                std::fs::read_link(&next).map_err(|e| format!("{}: {e}", next.display()))?;
            if last {
                return Err(format!(
                    "{} is a symlink (to {}): the cache's root must be the directory itself",
                    next.display(),
                    target.display()
                ));
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(format!(
                    "{}: more than {MAX_LINKS} links on the way",
                    next.display()
                ));
            }
            for component in target.components().rev() {
                match component {
                    Component::RootDir => at = PathBuf::from("/"),
                    Component::CurDir => {}
                    other => todo.push_front(other.as_os_str().to_os_string()),
                }
            }
            continue;
        }
        if last {
            check_root_dir(&next, &meta, uid)?;
        } else {
            check_above(&next, &meta)?;
        }
        at = next;
    }
    Ok(true)
}

/// What is at `path`, not following a link (`None`: nothing).
fn lstat(path: &Path) -> Result<Option<std::fs::Metadata>, String> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => Ok(Some(meta)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Refuses a component of the way to the cache that belongs to neither root nor `uid`.
fn check_owner(path: &Path, meta: &std::fs::Metadata, uid: u32) -> Result<(), String> {
    if meta.uid() != 0 && meta.uid() != uid {
        return Err(format!(
            "{} belongs to uid {}: the cache and every directory and link on the way to it must \
             belong to root or to uid {uid}",
            path.display(),
            meta.uid()
        ));
    }
    Ok(())
}

/// A directory on the way to the cache's root (already known to be root's or `uid`'s): others
/// may not write it, unless it has the sticky bit.
fn check_above(dir: &Path, meta: &std::fs::Metadata) -> Result<(), String> {
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(format!(
            "{} (above the cache) is mode {mode:o}, writable by others and without the sticky \
             bit: they could replace the cache below it (chmod go-w it, or give it the sticky \
             bit /tmp has)",
            dir.display()
        ));
    }
    Ok(())
}

/// The cache's root itself: a directory of `uid` that nobody else may write.
fn check_root_dir(root: &Path, meta: &std::fs::Metadata, uid: u32) -> Result<(), String> {
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} must be a directory of uid {uid} that nobody else may write (it is {}uid {}, \
             mode {:o})",
            root.display(),
            if meta.is_dir() {
                ""
            } else {
                "not a directory, "
            },
            meta.uid(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Whether `dir` (below `root`) exists, every component from `root` down a real directory:
/// `Err` names a component that is a link or not a directory.
fn no_links(root: &Path, dir: &Path) -> Result<bool, String> {
    let rel = dir
        .strip_prefix(root)
        .map_err(|_| format!("{} is outside the cache", dir.display()))?;
    let mut at = root.to_path_buf();
    for component in rel.components() {
        at.push(component);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(format!(
                    "{} is a link or not a directory: the cache is not followed through links",
                    at.display()
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(format!("{}: {e}", at.display())),
        }
    }
    Ok(true)
}

/// Creates `dir` (below `root`, its parents existing) owner-only if it is missing; a link or a
/// file in its place is refused.
fn make_dir(root: &Path, dir: &Path) -> Result<(), String> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => no_links(root, dir).map(|_| ()),
        Err(e) => Err(format!("{}: {e}", dir.display())),
    }
}

/// What the content path `path` holds against the pin `sha256`: a link is never followed.
fn verify(path: &Path, kind: RemoteKind, sha256: &str) -> Content {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Content::Missing,
        Err(e) => return Content::Bad(format!("{}: {e}", path.display())),
        Ok(m) if m.file_type().is_symlink() => {
            return Content::Bad(format!("{} is a link", path.display()))
        }
        Ok(_) => {}
    }
    let found = match kind {
        RemoteKind::Tree => {
            tree_hash::hash_tree(path, TreeFormat::ContentV1).map(|d| (d.sha256, Some(d.listing)))
        }
        RemoteKind::Blob => tree_hash::sha256_file(path).map(|r| (r.sha256, None)),
    };
    match found {
        Ok((found, listing)) if found == sha256 => Content::Verified(listing),
        Ok((found, _)) => Content::Bad(format!(
            "{} hashes to {found}, not to its pin {sha256}",
            path.display()
        )),
        Err(e) => Content::Bad(e.to_string()),
    }
}

/// The bytes of the file at `path`, opened without following a link (`None`: no file).
fn read_nofollow(path: &Path) -> Result<Option<Vec<u8>>, String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path);
    let mut bytes = Vec::new();
    match file {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
        Ok(f) => f
            .take(16 << 20)
            .read_to_end(&mut bytes)
            .map(|_| Some(bytes))
            .map_err(|e| format!("{}: {e}", path.display())),
    }
}

/// Removes what is at `path`: a link or file is unlinked, a directory removed with everything
/// in it after its owner's write permission is restored (a read-only tree still goes); links
/// inside are removed, never followed.
fn remove_nofollow(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => {
            make_writable(path);
            std::fs::remove_dir_all(path)
        }
        Ok(_) => std::fs::remove_file(path),
    }
}

/// Gives the owner write and search permission on every directory below `dir` (not following
/// links), so an entry someone made read-only can still be replaced.
fn make_writable(dir: &Path) {
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let mode = meta.permissions().mode() | 0o700;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            make_writable(&entry.path());
        }
    }
}
