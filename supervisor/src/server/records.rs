//! Iteration records kept inside the sandbox until collected:
//! `<records>/iteration-N/{result.json, events.jsonl, output.jsonl, stderr.log, output/,
//! transcripts/}`, root-owned, directories 0700.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Most bytes copied into `output/` and `transcripts/` of one record (agent-controlled data).
const COPY_BUDGET_BYTES: u64 = 1 << 30;
/// Most entries copied into `output/` and `transcripts/` of one record.
const COPY_BUDGET_ENTRIES: u64 = 100_000;

/// The record directory of iteration `n`.
pub(super) fn iteration_dir(records: &Path, n: u32) -> PathBuf {
    records.join(format!("iteration-{n}"))
}

/// Creates `dir` with mode 0700 (parents 0700 too), or checks an existing one is a directory.
pub(super) fn create_private_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::other("not a directory"));
    }
    fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
}

/// The highest `iteration-N` in `records` (0 when none).
pub(super) fn last_iteration(records: &Path) -> u32 {
    let Ok(dir) = fs::read_dir(records) else {
        return 0;
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("iteration-"))
                .and_then(|n| n.parse::<u32>().ok())
        })
        .max()
        .unwrap_or(0)
}

/// Writes `bytes` to `path` through a temporary file and a rename.
pub(super) fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, path)
}

/// What a copy into the record did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub(super) struct CopyReport {
    /// Files copied.
    pub files: u64,
    /// Bytes copied.
    pub bytes: u64,
    /// Entries skipped (symlinks, special files, over budget), as relative paths.
    pub skipped: Vec<String>,
}

/// Copies the tree `src` into `dst` without following symlinks (they and special files are
/// skipped), keeping files whose relative path `keep` accepts. Run only after the final reap,
/// when nothing but the supervisor runs, so the tree cannot change underneath.
pub(super) fn copy_tree(src: &Path, dst: &Path, keep: &dyn Fn(&Path) -> bool) -> CopyReport {
    let mut report = CopyReport::default();
    match fs::symlink_metadata(src) {
        Ok(meta) if meta.is_dir() => {}
        _ => return report,
    }
    let mut stack = vec![PathBuf::new()];
    let mut entries = 0u64;
    while let Some(rel) = stack.pop() {
        let Ok(dir) = fs::read_dir(src.join(&rel)) else {
            report.skipped.push(rel.display().to_string());
            continue;
        };
        let mut names: Vec<_> = dir.filter_map(Result::ok).map(|e| e.file_name()).collect();
        names.sort();
        for name in names {
            let rel = rel.join(&name);
            entries += 1;
            if entries > COPY_BUDGET_ENTRIES {
                report
                    .skipped
                    .push(format!("{} (entry budget)", rel.display()));
                return report;
            }
            let Ok(meta) = fs::symlink_metadata(src.join(&rel)) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(rel);
            } else if meta.is_file() && keep(&rel) {
                if report.bytes + meta.len() > COPY_BUDGET_BYTES {
                    report
                        .skipped
                        .push(format!("{} (byte budget)", rel.display()));
                    continue;
                }
                match copy_file(&src.join(&rel), &dst.join(&rel)) {
                    Ok(n) => {
                        report.files += 1;
                        report.bytes += n;
                    }
                    Err(err) => report.skipped.push(format!("{} ({err})", rel.display())),
                }
            } else if !meta.is_file() {
                report.skipped.push(rel.display().to_string());
            }
        }
    }
    report
}

fn copy_file(src: &Path, dst: &Path) -> io::Result<u64> {
    if let Some(parent) = dst.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)?;
    }
    let mut from = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(src)?;
    if !from.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    let mut to = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dst)?;
    io::copy(&mut from, &mut to)
}

/// Streams the directory `dir` as a tar archive (paths relative to `dir`, regular files and
/// directories only) into `out`.
pub(super) fn tar_dir(dir: &Path, out: &mut dyn Write) -> io::Result<()> {
    let mut builder = tar::Builder::new(out);
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let mut names: Vec<_> = fs::read_dir(dir.join(&rel))?
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        names.sort();
        for name in names {
            let rel = rel.join(&name);
            let path = dir.join(&rel);
            let meta = fs::symlink_metadata(&path)?;
            let mut header = tar::Header::new_gnu();
            header.set_mtime(
                meta.modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_secs()),
            );
            if meta.is_dir() {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(0o755);
                header.set_size(0);
                builder.append_data(&mut header, format!("{}/", rel.display()), io::empty())?;
                stack.push(rel);
            } else if meta.is_file() {
                let file: File = OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&path)?;
                let len = file.metadata()?.len();
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(0o644);
                header.set_size(len);
                builder.append_data(&mut header, &rel, file.take(len))?;
            }
        }
    }
    builder.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_skips_symlinks_and_tar_round_trips_through_unpack() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        fs::create_dir_all(src.join("sub")).unwrap();
        fs::write(src.join("sub/a.jsonl"), b"{}\n").unwrap();
        fs::write(src.join("b.txt"), b"b").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.join("link")).unwrap();
        let dst = tmp.path().join("dst");
        let report = copy_tree(&src, &dst, &|_| true);
        assert_eq!(report.files, 2);
        assert_eq!(report.skipped, vec!["link".to_string()]);
        assert!(fs::symlink_metadata(dst.join("link")).is_err());

        let mut bytes = Vec::new();
        tar_dir(&dst, &mut bytes).unwrap();
        let out = tmp.path().join("out");
        crate::unpack::unpack_tar(
            &bytes[..],
            &out,
            &crate::unpack::UnpackLimits::default(),
            None,
        )
        .unwrap();
        assert_eq!(fs::read(out.join("sub/a.jsonl")).unwrap(), b"{}\n");
    }
}
