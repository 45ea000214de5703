//! Iteration records kept inside the sandbox until collected:
//! `<records>/iteration-N/{result.json, events.jsonl, output.jsonl, stderr.log, output/,
//! transcripts/}`, root-owned, directories 0700.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Most bytes copied into `output/` and `transcripts/` of one record together
/// (agent-controlled data).
const COPY_BUDGET_BYTES: u64 = 1 << 30;
/// Most entries copied into `output/` and `transcripts/` of one record together: half of what
/// the host accepts in one collected archive ([`crate::unpack::UnpackLimits`]).
const COPY_BUDGET_ENTRIES: u64 = 50_000;
/// Most bytes of `output.jsonl` and of `stderr.log` kept in a record (each). With the copy
/// budget, a whole record stays under the host's 4 GiB unpack limit.
pub(super) const STREAM_CAP_BYTES: u64 = 1 << 30;

/// What the agent-controlled parts of one record may still take.
#[derive(Debug, Clone, Copy)]
pub(super) struct CopyBudget {
    bytes: u64,
    entries: u64,
}

impl CopyBudget {
    /// A budget that copies nothing (every entry is skipped and named).
    pub(super) fn none() -> Self {
        CopyBudget {
            bytes: 0,
            entries: 0,
        }
    }
}

impl Default for CopyBudget {
    fn default() -> Self {
        CopyBudget {
            bytes: COPY_BUDGET_BYTES,
            entries: COPY_BUDGET_ENTRIES,
        }
    }
}

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
    /// Entries skipped (symlinks, special files, hard links, names the host would refuse,
    /// over budget), as relative paths with the reason.
    pub skipped: Vec<String>,
}

/// Why an entry's relative path cannot travel in a collected archive, if it cannot: the host
/// unpacks records with the same rules as uploads, and one refused entry would lose the record.
fn name_problem(rel: &Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt as _;
    crate::unpack::check_entry_path(rel.as_os_str().as_bytes())
        .err()
        .map(|e| match e {
            crate::unpack::UnpackError::Refused { rule, .. } => rule,
            other => other.to_string(),
        })
}

/// Copies the tree `src` into `dst` without following symlinks, keeping files whose relative
/// path `keep` accepts, within `budget` (shared by the copies of one record). Skipped, each
/// named in the report: symlinks, special files, hard links (a link the agent made to a file
/// it cannot read must not be read by root), names the host's unpack would refuse, whatever
/// exceeds the budget. Run only after the final reap, when nothing but the supervisor runs, so
/// the tree cannot change underneath.
pub(super) fn copy_tree(
    src: &Path,
    dst: &Path,
    keep: &dyn Fn(&Path) -> bool,
    budget: &mut CopyBudget,
) -> CopyReport {
    let mut report = CopyReport::default();
    match fs::symlink_metadata(src) {
        Ok(meta) if meta.is_dir() => {}
        _ => return report,
    }
    // Not through a link in any component either (the agent may own a parent of `src`): root
    // would copy from wherever it points.
    if let Err(why) = crate::sandbox::nofollow::open_dir(src) {
        report.skipped.push(format!("{} ({why})", src.display()));
        return report;
    }
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let Ok(dir) = fs::read_dir(src.join(&rel)) else {
            report.skipped.push(rel.display().to_string());
            continue;
        };
        let mut names: Vec<_> = dir.filter_map(Result::ok).map(|e| e.file_name()).collect();
        names.sort();
        for name in names {
            let rel = rel.join(&name);
            if let Some(problem) = name_problem(&rel) {
                report
                    .skipped
                    .push(format!("{} ({problem})", rel.display()));
                continue;
            }
            if budget.entries == 0 {
                report
                    .skipped
                    .push(format!("{} (entry budget)", rel.display()));
                return report;
            }
            budget.entries -= 1;
            let Ok(meta) = fs::symlink_metadata(src.join(&rel)) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(rel);
            } else if meta.is_file() && keep(&rel) {
                if meta.len() > budget.bytes {
                    report
                        .skipped
                        .push(format!("{} (byte budget)", rel.display()));
                    continue;
                }
                match copy_file(&src.join(&rel), &dst.join(&rel), budget.bytes) {
                    Ok(n) => {
                        report.files += 1;
                        report.bytes += n;
                        budget.bytes -= n.min(budget.bytes);
                    }
                    Err(err) => report.skipped.push(format!("{} ({err})", rel.display())),
                }
            } else if !meta.is_file() {
                report
                    .skipped
                    .push(format!("{} (not a regular file)", rel.display()));
            }
        }
    }
    report
}

/// Copies one regular file (opened without following a link, never a hard link) into a new
/// `dst`, at most `limit` bytes.
fn copy_file(src: &Path, dst: &Path, limit: u64) -> io::Result<u64> {
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
    let meta = from.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    if std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
        return Err(io::Error::other("a hard link"));
    }
    let mut to = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dst)?;
    io::copy(&mut (&mut from).take(limit), &mut to)
}

/// Cuts the file at `path` to at most `cap` bytes; returns how many bytes were dropped (0 when
/// it was within the cap or does not exist).
pub(super) fn cap_file(path: &Path, cap: u64) -> io::Result<u64> {
    let file = match OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    if len <= cap {
        return Ok(0);
    }
    file.set_len(cap)?;
    Ok(len - cap)
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
        let report = copy_tree(&src, &dst, &|_| true, &mut CopyBudget::default());
        assert_eq!(report.files, 2);
        assert_eq!(
            report.skipped,
            vec!["link (not a regular file)".to_string()]
        );
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

    #[test]
    fn names_the_host_refuses_hard_links_and_the_budget_are_skipped_not_fatal() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        fs::create_dir_all(&src).unwrap();
        fs::write(src.join("a\\b"), b"x").unwrap();
        fs::write(src.join("line\nbreak"), b"x").unwrap();
        fs::write(src.join("ok.txt"), b"fine").unwrap();
        fs::write(src.join("big.bin"), vec![7u8; 4096]).unwrap();
        fs::write(src.join("h1"), b"linked").unwrap();
        fs::hard_link(src.join("h1"), src.join("h2")).unwrap();
        let dst = tmp.path().join("dst");
        let mut budget = CopyBudget {
            bytes: 100,
            entries: 10,
        };
        let report = copy_tree(&src, &dst, &|_| true, &mut budget);
        assert_eq!(report.files, 1, "{report:?}");
        assert_eq!(fs::read(dst.join("ok.txt")).unwrap(), b"fine");
        let skipped = report.skipped.join("; ");
        for expected in [
            "a\\b (name contains a backslash",
            "line\nbreak (name contains a newline",
            "big.bin (byte budget)",
            "h1 (a hard link)",
            "h2 (a hard link)",
        ] {
            assert!(skipped.contains(expected), "{expected}: {skipped}");
        }
        // Whatever was copied travels to the host.
        let mut bytes = Vec::new();
        tar_dir(&dst, &mut bytes).unwrap();
        let out = tmp.path().join("out");
        crate::unpack::unpack_tar(&bytes[..], &out, &Default::default(), None).unwrap();

        // The entry budget is shared: a second copy gets what the first left.
        let mut budget = CopyBudget {
            bytes: 1 << 20,
            entries: 2,
        };
        let first = copy_tree(&src, &tmp.path().join("d1"), &|_| true, &mut budget);
        let second = copy_tree(&src, &tmp.path().join("d2"), &|_| true, &mut budget);
        assert!(first.skipped.iter().any(|s| s.ends_with("(entry budget)")));
        assert_eq!(second.files, 0);
    }

    #[test]
    fn cap_file_cuts_only_what_is_over() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("out");
        fs::write(&f, vec![1u8; 100]).unwrap();
        assert_eq!(cap_file(&f, 200).unwrap(), 0);
        assert_eq!(cap_file(&f, 60).unwrap(), 40);
        assert_eq!(fs::metadata(&f).unwrap().len(), 60);
        assert_eq!(cap_file(&tmp.path().join("missing"), 1).unwrap(), 0);
    }

    #[test]
    fn a_source_reached_through_a_link_is_not_copied() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let real = base.join("real/sessions");
        fs::create_dir_all(&real).unwrap();
        fs::write(real.join("s.jsonl"), b"{}").unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("agent")).unwrap();
        let dst = base.join("dst");
        let report = copy_tree(
            &base.join("agent/sessions"),
            &dst,
            &|_| true,
            &mut CopyBudget::default(),
        );
        assert_eq!(report.files, 0);
        assert!(report.skipped[0].contains("is a symlink"), "{report:?}");
        assert!(!dst.exists());
        // The same directory reached without the link is copied.
        let report = copy_tree(&real, &dst, &|_| true, &mut CopyBudget::default());
        assert_eq!(report.files, 1);
    }
}
