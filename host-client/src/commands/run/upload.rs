//! Putting a compiled harness into the sandbox before the manifest is set: each plugin and
//! skills tree to its pinned path, the adapters (one small tar per destination directory), then
//! the workspace, owned by the agent. What goes where comes from the harness's [`Upload`] list.

use super::progress::{transfer, Progress};
use crate::engine::Connection;
use crate::tarball;
use anyhow::{bail, Context as _};
use pitcrew_core::harness::{Upload, UploadKind};
use pitcrew_core::protocol::UploadLimits;
use pitcrew_core::tree_hash::TreeFormat;
use pitcrew_core::unpack::offer::host::{self as offer_host, OfferListing};
use std::collections::BTreeMap;
use std::path::Path;

/// Uploads plugins, skills, adapters (one small tar per destination directory) and the
/// workspace (owned by the agent).
pub(super) fn upload_all(
    conn: &mut Connection,
    uploads: &[Upload],
    progress: &Progress,
) -> anyhow::Result<()> {
    check_limits(uploads, conn.hello().capabilities.upload_limits)?;
    let of_kind = |kind: fn(UploadKind) -> bool| uploads.iter().filter(move |u| kind(u.kind));
    for u in of_kind(|k| matches!(k, UploadKind::PluginTree | UploadKind::SkillTree)) {
        let (host, dest) = (&u.host_path, &u.sandbox_path);
        let what = format!("uploading {} → {dest}", host.display());
        upload_tree(conn, progress, &what, u)?;
    }
    // Adapters: each destination directory receives one tar with its files (pinned files, like
    // pinned trees, are the supervisor's: no owner). A tar replaces its directory whole, and a
    // config adapter may go below the config dir (`to: agents/reviewer.md`): the map's order
    // sends a directory before every directory below it (a path sorts after its prefixes), so
    // no later tar removes what an earlier one put there.
    let mut by_dir: BTreeMap<String, Vec<(String, &Path)>> = BTreeMap::new();
    for u in of_kind(|k| k == UploadKind::AdapterFile) {
        let (dir, name) = u
            .sandbox_path
            .rsplit_once('/')
            .with_context(|| format!("adapter destination {} has no directory", u.sandbox_path))?;
        by_dir
            .entry(dir.to_string())
            .or_default()
            .push((name.to_string(), &u.host_path));
    }
    for (dir, files) in &by_dir {
        progress.status(&format!(
            "uploading {} adapter file(s) → {dir}",
            files.len()
        ));
        conn.client()
            .upload(dir, None, |w| tarball::write_files(w, files))
            .map_err(|e| conn.explain(e))?;
    }
    for u in of_kind(|k| k == UploadKind::Workspace) {
        let (work, dest) = (&u.host_path, &u.sandbox_path);
        let what = format!("uploading workspace {} → {dest}", work.display());
        upload_tree(conn, progress, &what, u)?;
    }
    Ok(())
}

/// Uploads the tree of `u` to its sandbox path; on a terminal the status line counts the bytes
/// sent, of the tree's size, and the rate once it runs a second. Offered, its listing comes from
/// the walk that already hashed the tree for the manifest (a pinned tree), or from one walk now
/// (the workspace): each tree is read once per run. A listing walked now is sent as the walk
/// hashes the tree unless the supervisor may hold one for the destination to name it against
/// (then it is made whole first and named by digest).
fn upload_tree(
    conn: &mut Connection,
    progress: &Progress,
    what: &str,
    u: &Upload,
) -> anyhow::Result<()> {
    let (host, dest, owner) = (&u.host_path, &u.sandbox_path, u.owner);
    progress.status(what);
    let features = &conn.hello().capabilities;
    let offer = features.has_feature("upload.offer");
    let by_digest = features.has_feature("upload.listing_digest");
    if !offer {
        let total = if progress.live() { tree_bytes(host) } else { 0 };
        conn.client()
            .upload(dest, owner, |w| {
                let mut counting = counting(w, progress, what, total);
                tarball::write_tree(&mut counting, host)
            })
            .map_err(|e| conn.explain(e))?;
        return Ok(());
    }
    let listing_of = || format!("{}: listing the tree to upload", host.display());
    if u.digest.is_none() && !conn.client().names_listing(dest, by_digest) {
        // Nothing to name: the listing follows the `upload` as the walk hashes the tree.
        let detail = conn
            .client()
            .upload_streamed(
                dest,
                owner,
                by_digest,
                |w| offer_host::list_tree_to(host, w).with_context(listing_of),
                |w, offered, need| {
                    let total = offered.needed_tar_bytes(need);
                    let mut counting = counting(w, progress, what, total);
                    Ok(offer_host::write_needed(&mut counting, offered, need)?)
                },
            )
            .map_err(|e| conn.explain(e))?;
        tracing::debug!("{what}: {detail}");
        return Ok(());
    }
    let listing = match &u.digest {
        Some(digest) => OfferListing::from_digest(host, digest),
        None => OfferListing::of_tree(host, TreeFormat::PiTreeV1, None).map(|(_, l)| l),
    }
    .with_context(listing_of)?;
    let detail = conn
        .client()
        .upload_listed(dest, owner, &listing, by_digest, |w, need| {
            let total = listing.offered.needed_tar_bytes(need);
            let mut counting = counting(w, progress, what, total);
            Ok(offer_host::write_needed(
                &mut counting,
                &listing.offered,
                need,
            )?)
        })
        .map_err(|e| conn.explain(e))?;
    tracing::debug!("{what}: {detail}");
    Ok(())
}

/// A writer that redraws the status line of `what` with the bytes passed through it, of
/// `total`, at most every [`REPORT_EVERY`].
fn counting<'a>(
    inner: &'a mut dyn std::io::Write,
    progress: &'a Progress,
    what: &'a str,
    total: u64,
) -> Counting<'a> {
    let started = std::time::Instant::now();
    let mut last = started;
    let mut sent = 0u64;
    Counting {
        inner,
        on_write: Box::new(move |n| {
            sent += n;
            if progress.live() && last.elapsed() >= REPORT_EVERY {
                last = std::time::Instant::now();
                progress.status(&transfer(what, sent, total, started.elapsed()));
            }
        }),
    }
}

/// The zstd level uploads are compressed at when nothing says otherwise (chosen by
/// `benches/upload.rs`: see docs/benchmarks.md).
pub(super) const DEFAULT_ZSTD_LEVEL: i32 = 3;

/// The zstd level of this run's uploads, or `None`: `PITCREW_UPLOAD_COMPRESSION` is `auto`
/// (the default: zstd, except on the local engine, whose pipe is faster than compressing),
/// `off`, `zstd` or `zstd:LEVEL` (1 to 19). A supervisor without the `upload.zstd` feature gets
/// uncompressed streams whatever the setting.
pub(super) fn upload_compression(engine: &str, features: &[String]) -> anyhow::Result<Option<i32>> {
    let setting = std::env::var("PITCREW_UPLOAD_COMPRESSION").unwrap_or_default();
    let level = match setting.as_str() {
        "" | "auto" => (engine != "local").then_some(DEFAULT_ZSTD_LEVEL),
        "off" => None,
        "zstd" => Some(DEFAULT_ZSTD_LEVEL),
        other => match other.strip_prefix("zstd:").map(str::parse::<i32>) {
            Some(Ok(level)) if (1..=19).contains(&level) => Some(level),
            _ => bail!(
                "PITCREW_UPLOAD_COMPRESSION={other:?}: expected auto, off, zstd or zstd:LEVEL \
                 (1 to 19)"
            ),
        },
    };
    Ok(level.filter(|_| features.iter().any(|f| f == "upload.zstd")))
}

/// Refuses, before anything is sent, a tree over the limits the sandbox's supervisor reported
/// in `hello` (its `--upload-max-entries` and `--upload-max-bytes`).
fn check_limits(uploads: &[Upload], limits: Option<UploadLimits>) -> anyhow::Result<()> {
    let Some(limits) = limits else {
        return Ok(());
    };
    let trees = uploads.iter().filter(|u| {
        matches!(
            u.kind,
            UploadKind::PluginTree | UploadKind::SkillTree | UploadKind::Workspace
        )
    });
    for u in trees {
        let size = pitcrew_core::unpack::offer::host::tree_size(
            &u.host_path,
            limits.max_entries.saturating_add(1),
        );
        let over = if size.entries > limits.max_entries {
            format!(
                "more than {} entries (files and directories), the most one upload may hold \
                 in this sandbox (its supervisor's --upload-max-entries; the harness's \
                 upload_limits.entries sets it for a new sandbox)",
                limits.max_entries
            )
        } else if size.file_bytes > limits.max_bytes {
            format!(
                "{} bytes of files, more than the {} one upload may hold in this sandbox (its \
                 supervisor's --upload-max-bytes; the harness's upload_limits.size sets it for a \
                 new sandbox)",
                size.file_bytes, limits.max_bytes
            )
        } else {
            continue;
        };
        bail!(
            "{} (uploaded to {}): {over}; nothing was uploaded",
            u.host_path.display(),
            u.sandbox_path
        );
    }
    Ok(())
}

/// How often the upload status line is redrawn.
const REPORT_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

/// About the bytes of the tar stream of `dir` (what the counting writer sees): a 512-byte
/// header per entry and each file's data rounded up to 512, plus the 1024-byte end; 0 (size
/// unknown) past [`SIZE_WALK_ENTRIES`] entries.
fn tree_bytes(dir: &Path) -> u64 {
    let size = pitcrew_core::unpack::offer::host::tree_size(dir, SIZE_WALK_ENTRIES as u64 + 1);
    if size.entries > SIZE_WALK_ENTRIES as u64 {
        return 0;
    }
    size.tar_bytes
}

/// Most entries [`tree_bytes`] looks at before it gives up on a total.
const SIZE_WALK_ENTRIES: usize = 1_000_000;

/// A writer that reports how many bytes passed through it.
struct Counting<'a> {
    inner: &'a mut dyn std::io::Write,
    on_write: Box<dyn FnMut(u64) + 'a>,
}

impl std::io::Write for Counting<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        (self.on_write)(n as u64);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_over_the_supervisors_limits_is_refused_naming_it_before_anything_is_sent() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        for i in 0..5 {
            std::fs::write(dir.path().join(format!("a/b/f{i}")), vec![b'x'; 100]).unwrap();
        }
        let upload = Upload {
            kind: UploadKind::Workspace,
            host_path: dir.path().to_path_buf(),
            sandbox_path: "/pitcrew/workspace".into(),
            owner: None,
            digest: None,
        };
        let limits = |max_entries, max_bytes| {
            Some(UploadLimits {
                max_entries,
                max_bytes,
            })
        };
        // 7 entries (a, a/b and five files), 500 bytes.
        check_limits(std::slice::from_ref(&upload), limits(7, 500)).unwrap();
        check_limits(std::slice::from_ref(&upload), None).unwrap();
        let err = check_limits(std::slice::from_ref(&upload), limits(6, 500)).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("more than 6 entries")
                && msg.contains("/pitcrew/workspace")
                && msg.contains("--upload-max-entries")
                && msg.contains(&dir.path().display().to_string()),
            "{msg}"
        );
        let err = check_limits(std::slice::from_ref(&upload), limits(7, 499)).unwrap_err();
        assert!(err.to_string().contains("500 bytes of files"), "{err}");
    }

    #[test]
    fn uploads_are_compressed_except_over_the_local_pipe_unless_the_operator_says() {
        let with = vec!["upload.zstd".to_string()];
        let set = |v: Option<&str>| match v {
            Some(v) => std::env::set_var("PITCREW_UPLOAD_COMPRESSION", v),
            None => std::env::remove_var("PITCREW_UPLOAD_COMPRESSION"),
        };
        let _guard = ENV_LOCK
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        set(None);
        assert_eq!(upload_compression("local", &with).unwrap(), None);
        assert_eq!(
            upload_compression("kubernetes", &with).unwrap(),
            Some(DEFAULT_ZSTD_LEVEL)
        );
        assert_eq!(upload_compression("kubernetes", &[]).unwrap(), None);
        set(Some("zstd:9"));
        assert_eq!(upload_compression("local", &with).unwrap(), Some(9));
        set(Some("off"));
        assert_eq!(upload_compression("podman", &with).unwrap(), None);
        set(Some("zstd:42"));
        let err = upload_compression("podman", &with).unwrap_err();
        assert!(
            err.to_string().contains("PITCREW_UPLOAD_COMPRESSION"),
            "{err}"
        );
        set(None);
    }

    /// The tests that set `PITCREW_UPLOAD_COMPRESSION` take turns.
    static ENV_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn the_size_estimate_is_the_tar_streams_within_a_header() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src/deep")).unwrap();
        for i in 0..200 {
            std::fs::write(dir.path().join(format!("src/f{i}")), vec![b'x'; i * 7]).unwrap();
        }
        std::fs::write(dir.path().join("src/deep/big"), vec![0u8; 100_000]).unwrap();
        let mut tar = Vec::new();
        tarball::write_tree(&mut tar, dir.path()).unwrap();
        let estimate = tree_bytes(dir.path());
        let actual = tar.len() as u64;
        // The tar stream may end with padding to its record size; headers are counted alike.
        assert!(
            estimate.abs_diff(actual) <= 10_240,
            "estimate {estimate}, tar {actual}"
        );
    }
}
