//! Iteration records kept inside the sandbox until collected:
//! `<records>/iteration-N/{result.json, events.jsonl, output.jsonl, stderr.log, output/,
//! transcripts/}`, root-owned, directories 0700.

use crate::bounded_tree::{self, DirStack, Step, Walk};
use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd as _, BorrowedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// Most bytes copied into `output/`, `transcripts/` and `workspace/` of one record together
/// (agent-controlled data), whatever the disk budget ([`copy_budget_bytes`]).
const COPY_BUDGET_BYTES: u64 = 1 << 30;
/// Most entries copied into `output/`, `transcripts/` and `workspace/` of one record together:
/// half of what the host accepts in one collected archive ([`crate::unpack::UnpackLimits`]).
const COPY_BUDGET_ENTRIES: u64 = 50_000;
/// The directories of a record the agent's files are copied into, which share one budget.
pub const COPIED_PARTS: &[&str] = &["output", "transcripts", "workspace"];

/// Most bytes the copies of one record ([`COPIED_PARTS`]) cost together: 1 GiB, or the
/// harness's disk budget (`limits.disk_bytes`) when it is smaller. Every entry copied costs what
/// the host's file system allocates for it ([`crate::unpack::file_cost`],
/// [`crate::unpack::DIR_COST`]): a file its apparent size (`st_size`, which is what the copy
/// writes and the host unpacks: a sparse file the agent made in a few KiB costs its full
/// length) in whole 4 KiB blocks, at least 512 bytes; a directory the copy creates 4 KiB, so
/// thousands of directories holding an empty file each cannot cost the host past the budget.
/// The host bounds its unpack of a record by the same number, counted the same way.
pub fn copy_budget_bytes(disk_bytes: Option<u64>) -> u64 {
    disk_bytes.map_or(COPY_BUDGET_BYTES, |disk| disk.min(COPY_BUDGET_BYTES))
}

/// The host's bound on the copies of a collected record ([`COPIED_PARTS`]) under the disk
/// budget `disk_bytes`: what the supervisor copies never exceeds it.
pub fn copies_limit(disk_bytes: Option<u64>) -> crate::unpack::PartLimit {
    crate::unpack::PartLimit {
        dirs: COPIED_PARTS,
        max_bytes: copy_budget_bytes(disk_bytes),
        entry_cost: true,
    }
}
/// Most bytes of `output.jsonl` and of `stderr.log` kept in a record (each): the capture's own
/// cap, never written past. With the copy budget, a whole record stays under the host's 4 GiB
/// unpack limit.
pub(super) const STREAM_CAP_BYTES: u64 = crate::sandbox::capture::STREAM_CAP;

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

    /// The budget of one record's copies under the disk budget `disk_bytes`
    /// ([`copy_budget_bytes`]).
    pub(super) fn for_record(disk_bytes: Option<u64>) -> Self {
        CopyBudget {
            bytes: copy_budget_bytes(disk_bytes),
            entries: COPY_BUDGET_ENTRIES,
        }
    }

    /// The bytes still free.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Default for CopyBudget {
    fn default() -> Self {
        CopyBudget::for_record(None)
    }
}

/// The record directory of iteration `n`.
pub(super) fn iteration_dir(records: &Path, n: u32) -> PathBuf {
    records.join(crate::record_names::iteration_dir_name(n))
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

/// Gives the records directory and the record `dir` back their owner's rights (0700), without
/// following links. In the unprivileged mode the agent's uid owns them, and Landlock does not
/// stop `chmod`: an agent could make its own record unreadable (`chmod 000`) to hide it. Called
/// after the final reap (before the record is written) and before a collect; the entries inside
/// get their rights back as [`tar_dir`] reads them. Only the supervisor creates entries there.
pub(super) fn restore_modes(records: &Path, dir: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    for path in [records, dir] {
        match fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() && m.permissions().mode() & 0o700 != 0o700 => {
                if let Err(e) = fs::set_permissions(path, fs::Permissions::from_mode(0o700)) {
                    tracing::warn!("record: restore mode 700 of {}: {e}", path.display());
                }
            }
            _ => {}
        }
    }
}

/// The numbers of the `iteration-N` entries in `records` (none when it cannot be read).
pub(super) fn iterations_in(records: &Path) -> Vec<u32> {
    let Ok(dir) = fs::read_dir(records) else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(crate::record_names::parse_iteration_dir)
        })
        .collect()
}

/// The highest `iteration-N` in `records` (0 when none).
pub(super) fn last_iteration(records: &Path) -> u32 {
    iterations_in(records).into_iter().max().unwrap_or(0)
}

/// Most skipped entries named in a [`CopyReport`] (the count is always exact).
const SKIPPED_NAMED: usize = 100;

/// What a copy into the record did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub(super) struct CopyReport {
    /// Files copied.
    pub files: u64,
    /// Bytes copied.
    pub bytes: u64,
    /// Entries skipped (symlinks, special files, hard links, names the host would refuse,
    /// over budget), as relative paths with the reason; the first [`SKIPPED_NAMED`].
    pub skipped: Vec<String>,
    /// How many entries were skipped.
    pub skipped_count: u64,
}

impl CopyReport {
    /// Adds what another copy into the same part of the record did.
    pub(super) fn add(&mut self, other: CopyReport) {
        self.files += other.files;
        self.bytes += other.bytes;
        self.skipped_count += other.skipped_count;
        let room = SKIPPED_NAMED.saturating_sub(self.skipped.len());
        self.skipped.extend(other.skipped.into_iter().take(room));
    }

    /// Counts a skipped entry, and names it while fewer than [`SKIPPED_NAMED`] are named.
    fn skip(&mut self, what: impl FnOnce() -> String) {
        self.skipped_count += 1;
        if self.skipped.len() < SKIPPED_NAMED {
            self.skipped.push(what());
        }
    }
}

/// Why an entry's path in the record (`output/…`, `transcripts/…`) cannot travel in a
/// collected archive, if it cannot: the host unpacks records with the same rules as uploads,
/// and one refused entry would lose the record.
fn name_problem(in_record: &Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt as _;
    crate::unpack::check_entry_path(in_record.as_os_str().as_bytes())
        .err()
        .map(|e| match e {
            crate::unpack::UnpackError::Refused { rule, .. } => rule,
            other => other.to_string(),
        })
}

/// The copy's side of the record: directories created on the way to the first file copied into
/// them, mirroring where the walk is.
struct Target<'a> {
    root: &'a Path,
    dirs: Option<DirStack>,
    /// Directories created and not charged to the budget yet.
    created: u64,
}

impl Target<'_> {
    /// The most directories [`Self::dir_for`] creates for `rel` (after [`Self::truncate`] to
    /// its walk's depth): the root when not open yet, and each parent below the open depth.
    fn dirs_needed(&self, rel: &Path) -> u64 {
        let parents = rel.parent().map_or(0, |p| p.iter().count());
        let needed = match &self.dirs {
            None => parents + 1,
            Some(dirs) => parents.saturating_sub(dirs.depth()),
        };
        u64::try_from(needed).unwrap_or(u64::MAX)
    }

    /// Forgets directories below `depth` (the walk left them).
    fn truncate(&mut self, depth: usize) -> io::Result<()> {
        match self.dirs.as_mut() {
            Some(dirs) => dirs.truncate(depth),
            None => Ok(()),
        }
    }

    /// The directory of the record that mirrors the parent of `rel` (created as needed).
    fn dir_for(&mut self, rel: &Path) -> io::Result<BorrowedFd<'_>> {
        if self.dirs.is_none() {
            // Another copy into the same part (`transcripts/`) may have created it.
            let existed = fs::symlink_metadata(self.root).is_ok();
            create_private_dir(self.root)?;
            self.created += u64::from(!existed);
            self.dirs = Some(DirStack::new(bounded_tree::open_dir(self.root)?)?);
        }
        let Some(dirs) = self.dirs.as_mut() else {
            return Err(io::Error::other("record directory not open"));
        };
        let parent = rel.parent().unwrap_or(Path::new(""));
        for name in parent.iter().skip(dirs.depth()) {
            match rustix::fs::mkdirat(dirs.dir(), name, Mode::from_raw_mode(0o700)) {
                Ok(()) => self.created += 1,
                Err(Errno::EXIST) => {}
                Err(err) => return Err(err.into()),
            }
            dirs.enter(name)?;
        }
        Ok(dirs.dir())
    }
}

/// Copies the tree `src` into `dst` (whose path in the record is `in_record`: `output`,
/// `transcripts`, `workspace`) without following symlinks, keeping files whose relative path `keep`
/// accepts, within `budget` (shared by the copies of one record). Skipped, each named in the
/// report: symlinks, special files, hard links (a link the agent made to a file it cannot read
/// must not be read by root), names the host's unpack would refuse (`in_record/<path>` over
/// 4096 bytes included: a directory that long is not walked into, so the walk's depth stays
/// bounded), whatever exceeds the budget (a file and the directories created for it take what
/// they cost the host from the byte budget, [`copy_budget_bytes`]: its apparent size, holes
/// included, and is copied whole or not at all; every entry, skipped ones too, takes one from
/// the entry budget; a directory no file is copied into is not created). Walked and written
/// relative to directory descriptors ([`crate::bounded_tree`]), never through full paths, so a
/// path longer than `PATH_MAX` on either side is copied as well. Run only after the final
/// reap, when nothing but the supervisor runs, so the tree cannot change underneath.
pub(super) fn copy_tree(
    src: &Path,
    dst: &Path,
    in_record: &str,
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
    let root = crate::sandbox::nofollow::open_dir(src).and_then(|fd| {
        bounded_tree::open_dir_at(fd.as_fd(), std::ffi::OsStr::new("."))
            .map_err(|e| format!("{}: {e}", src.display()))
    });
    let root = match root {
        Ok(root) => root,
        Err(why) => {
            report.skip(|| format!("{} ({why})", src.display()));
            return report;
        }
    };
    let mut walk = match Walk::new(root, &src.display().to_string(), budget.entries) {
        Ok(walk) => walk,
        Err(err) => {
            report.skip(|| format!("{} ({err})", src.display()));
            return report;
        }
    };
    let mut target = Target {
        root: dst,
        dirs: None,
        created: 0,
    };
    while let Some(step) = walk.next() {
        let entry = match step {
            Ok(Step::Entry(entry)) => entry,
            Ok(Step::Limit(rel)) => {
                report.skip(|| format!("{} (entry budget)", rel.display()));
                break;
            }
            Err(err) => {
                report.skip(|| err.to_string());
                continue;
            }
        };
        let rel = &entry.rel;
        if let Some(problem) = name_problem(&Path::new(in_record).join(rel)) {
            report.skip(|| format!("{} ({problem})", rel.display()));
            continue;
        }
        let kind = entry.file_type();
        if kind == FileType::Directory {
            let entered = target
                .truncate(entry.depth)
                .map_err(|e| e.to_string())
                .and_then(|()| walk.enter().map_err(|e| e.to_string()));
            if let Err(err) = entered {
                report.skip(|| format!("{} ({err})", rel.display()));
            }
            continue;
        }
        if kind != FileType::RegularFile {
            report.skip(|| format!("{} (not a regular file)", rel.display()));
            continue;
        }
        if !keep(rel) {
            continue;
        }
        if let Err(err) = target.truncate(entry.depth) {
            report.skip(|| format!("{} ({err})", rel.display()));
            continue;
        }
        // The apparent size, holes included: the copy writes every byte of it, and the host
        // unpacks every byte, in whole blocks, below the directories created for it.
        let size = u64::try_from(entry.stat.st_size).unwrap_or(u64::MAX);
        let cost = crate::unpack::file_cost(size).saturating_add(
            target
                .dirs_needed(rel)
                .saturating_mul(crate::unpack::DIR_COST),
        );
        if cost > budget.bytes {
            report.skip(|| {
                format!(
                    "{} (byte budget: {cost} bytes, {} left)",
                    rel.display(),
                    budget.bytes
                )
            });
            continue;
        }
        let copied = target
            .dir_for(rel)
            .and_then(|to| copy_file(walk.dir(), &entry.name, to, size));
        // What was created is charged whether the file was copied or not.
        let dirs = std::mem::take(&mut target.created).saturating_mul(crate::unpack::DIR_COST);
        budget.bytes -= dirs.min(budget.bytes);
        match copied {
            Ok(n) => {
                report.files += 1;
                report.bytes += n;
                budget.bytes -= crate::unpack::file_cost(n).min(budget.bytes);
            }
            Err(err) => report.skip(|| format!("{} ({err})", rel.display())),
        }
    }
    budget.entries = walk.left();
    report
}

/// Copies the regular file `name` of `from_dir` (opened without following a link, never a hard
/// link) into a new file of the same name in `to_dir`, at most `limit` bytes.
fn copy_file(
    from_dir: BorrowedFd<'_>,
    name: &std::ffi::OsStr,
    to_dir: BorrowedFd<'_>,
    limit: u64,
) -> io::Result<u64> {
    let from = rustix::fs::openat(
        from_dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let from = File::from(from);
    let meta = from.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    if std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
        return Err(io::Error::other("a hard link"));
    }
    let to = rustix::fs::openat(
        to_dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    io::copy(&mut from.take(limit), &mut File::from(to))
}

/// Gives an entry of a record the owner's rights `wanted` back when it lacks any of them. In
/// the unprivileged mode the agent's uid owns the records and Landlock does not stop `chmod`:
/// a later agent could make an earlier record unreadable, at any depth. Only the supervisor
/// creates or renames entries there, so the entry is the one the walk saw.
fn own_again(dir: BorrowedFd<'_>, entry: &bounded_tree::WalkEntry, wanted: u32) -> io::Result<()> {
    if entry.stat.st_mode & wanted == wanted {
        return Ok(());
    }
    rustix::fs::chmodat(
        dir,
        &entry.name,
        Mode::from_raw_mode(wanted),
        rustix::fs::AtFlags::empty(),
    )?;
    Ok(())
}

/// Streams the directory `dir` as a tar archive (paths relative to `dir`, regular files and
/// directories only, nothing followed) into `out`, walked relative to directory descriptors
/// ([`crate::bounded_tree`]): a record as deep or as long as [`copy_tree`] lets it be is read in
/// a bounded number of descriptors. Entries missing their owner's rights get them back as they
/// are read (see [`restore_modes`]). The host uses it too, to read a record from a sandbox's
/// storage when its supervisor is gone.
pub fn tar_dir(dir: &Path, out: &mut dyn Write) -> io::Result<()> {
    let mut builder = tar::Builder::new(out);
    let root = bounded_tree::open_dir(dir)?;
    let mut walk =
        Walk::new(root, &dir.display().to_string(), u64::MAX).map_err(io::Error::other)?;
    while let Some(step) = walk.next() {
        let entry = match step.map_err(io::Error::other)? {
            Step::Entry(entry) => entry,
            Step::Limit(_) => break,
        };
        let mut header = tar::Header::new_gnu();
        header.set_mtime(u64::try_from(entry.stat.st_mtime).unwrap_or(0));
        match entry.file_type() {
            FileType::Directory => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(0o755);
                header.set_size(0);
                builder.append_data(
                    &mut header,
                    format!("{}/", entry.rel.display()),
                    io::empty(),
                )?;
                own_again(walk.dir(), &entry, 0o700)?;
                walk.enter().map_err(io::Error::other)?;
            }
            FileType::RegularFile => {
                own_again(walk.dir(), &entry, 0o600)?;
                let file = File::from(rustix::fs::openat(
                    walk.dir(),
                    &entry.name,
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )?);
                let len = file.metadata()?.len();
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(0o644);
                header.set_size(len);
                builder.append_data(&mut header, &entry.rel, file.take(len))?;
            }
            _ => {}
        }
    }
    builder.finish()
}

/// Streams a record that exists only in memory as a tar archive holding `result.json` alone.
pub(super) fn tar_record_line(line: &[u8], out: &mut dyn Write) -> io::Result<()> {
    let mut builder = tar::Builder::new(out);
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(0o644);
    header.set_size(line.len() as u64);
    header.set_mtime(crate::clock::now_secs());
    builder.append_data(&mut header, crate::record_names::RESULT_FILE, line)?;
    builder.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_record_names_count_as_iterations() {
        // The host reads a stopped sandbox's storage by the same rule: `iteration-007` is not
        // iteration 7 on either side, so it neither raises the next number nor gets collected.
        let tmp = tempfile::tempdir().unwrap();
        for name in [
            "iteration-3",
            "iteration-007",
            "iteration-0",
            "iteration-9x",
            "other",
        ] {
            fs::create_dir(tmp.path().join(name)).unwrap();
        }
        assert_eq!(iterations_in(tmp.path()), vec![3]);
        assert_eq!(last_iteration(tmp.path()), 3);
        assert_eq!(iteration_dir(tmp.path(), 4), tmp.path().join("iteration-4"));
    }

    #[test]
    fn copy_skips_symlinks_and_tar_round_trips_through_unpack() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        fs::create_dir_all(src.join("sub")).unwrap();
        fs::write(src.join("sub/a.jsonl"), b"{}\n").unwrap();
        fs::write(src.join("b.txt"), b"b").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.join("link")).unwrap();
        let dst = tmp.path().join("dst");
        let report = copy_tree(&src, &dst, "output", &|_| true, &mut CopyBudget::default());
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
        fs::write(src.join("big.bin"), vec![7u8; 3 * 4096]).unwrap();
        fs::write(src.join("h1"), b"linked").unwrap();
        fs::hard_link(src.join("h1"), src.join("h2")).unwrap();
        let dst = tmp.path().join("dst");
        // Room for `output/` and `ok.txt` (4 KiB each), and a block to spare: whichever order
        // the walk takes, each hard link reaches the copy, which refuses it.
        let mut budget = CopyBudget {
            bytes: 3 * 4096,
            entries: 10,
        };
        let report = copy_tree(&src, &dst, "output", &|_| true, &mut budget);
        assert_eq!(report.files, 1, "{report:?}");
        assert_eq!(fs::read(dst.join("ok.txt")).unwrap(), b"fine");
        let skipped = report.skipped.join("; ");
        for expected in [
            "a\\b (name contains a backslash",
            "line\nbreak (name contains a newline",
            "big.bin (byte budget: ",
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
        let first = copy_tree(
            &src,
            &tmp.path().join("d1"),
            "output",
            &|_| true,
            &mut budget,
        );
        let second = copy_tree(
            &src,
            &tmp.path().join("d2"),
            "output",
            &|_| true,
            &mut budget,
        );
        assert!(first.skipped.iter().any(|s| s.ends_with("(entry budget)")));
        assert_eq!(second.files, 0);
    }

    #[test]
    fn the_disk_budget_bounds_the_copies_when_smaller() {
        assert_eq!(copy_budget_bytes(None), COPY_BUDGET_BYTES);
        assert_eq!(copy_budget_bytes(Some(16 << 20)), 16 << 20);
        assert_eq!(copy_budget_bytes(Some(8 << 30)), COPY_BUDGET_BYTES);
        assert_eq!(CopyBudget::for_record(Some(1 << 20)).bytes(), 1 << 20);
        assert_eq!(CopyBudget::default().bytes(), COPY_BUDGET_BYTES);
        assert_eq!(copies_limit(Some(1 << 20)).max_bytes, 1 << 20);
        assert_eq!(copies_limit(None).dirs, COPIED_PARTS);
        assert!(copies_limit(None).entry_cost);
    }

    #[test]
    fn sparse_files_take_their_apparent_size_from_the_budget_and_the_host_agrees() {
        use std::os::unix::fs::MetadataExt as _;
        const K: u64 = 1024;
        // Three 300 KiB files that are holes only (a few blocks on disk, if any), copied into
        // `output/` under a 700 KiB disk budget: two fit (with `output/`'s 4 KiB), the third is
        // named.
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("output");
        fs::create_dir_all(&out).unwrap();
        for name in ["s1", "s2", "s3"] {
            File::create(out.join(name))
                .unwrap()
                .set_len(300 * K)
                .unwrap();
        }
        let record = tmp.path().join("record");
        let mut budget = CopyBudget::for_record(Some(700 * K));
        let report = copy_tree(
            &out,
            &record.join("output"),
            "output",
            &|_| true,
            &mut budget,
        );
        assert_eq!((report.files, report.bytes), (2, 600 * K), "{report:?}");
        assert_eq!(report.skipped_count, 1, "{report:?}");
        assert!(
            report.skipped[0].ends_with(" (byte budget: 307200 bytes, 98304 left)"),
            "{report:?}"
        );
        assert_eq!(budget.bytes(), 96 * K);
        // The copies are whole files, each its full length.
        for entry in fs::read_dir(record.join("output")).unwrap() {
            assert_eq!(entry.unwrap().metadata().unwrap().len(), 300 * K);
        }
        // The workspace shares what is left: a 200 KiB hole is cut, 50 KiB of data is not.
        let ws = tmp.path().join("ws");
        fs::create_dir_all(&ws).unwrap();
        File::create(ws.join("hole"))
            .unwrap()
            .set_len(200 * K)
            .unwrap();
        fs::write(ws.join("data"), vec![1u8; 50 * 1024]).unwrap();
        assert!(fs::metadata(ws.join("hole")).unwrap().blocks() * 512 < 200 * K);
        let report = copy_tree(
            &ws,
            &record.join("workspace"),
            "workspace",
            &|_| true,
            &mut budget,
        );
        assert_eq!((report.files, report.bytes), (1, 50 * K), "{report:?}");
        assert_eq!(report.skipped_count, 1, "{report:?}");
        // With `workspace/` or without, as the walk reached it before or after `data`.
        assert!(
            report.skipped[0].starts_with("hole (byte budget: 20"),
            "{report:?}"
        );
        // The host unpacks the record within the same bound, and refuses one tighter.
        let mut bytes = Vec::new();
        tar_dir(&record, &mut bytes).unwrap();
        let limits = |disk| crate::unpack::UnpackLimits {
            part: Some(copies_limit(Some(disk))),
            ..Default::default()
        };
        let host = tmp.path().join("host");
        let unpacked = crate::unpack::unpack_tar(&bytes[..], &host, &limits(700 * K), None);
        assert_eq!(unpacked.unwrap().bytes, 650 * K);
        let refused = crate::unpack::unpack_tar(&bytes[..], &host, &limits(600 * K), None);
        assert!(refused.unwrap_err().to_string().contains(
            "more than 614400 bytes of files and directories (each counted in whole 4096-byte \
             blocks) below output/, transcripts/, workspace/"
        ),);
    }

    #[test]
    fn directories_and_empty_files_cost_what_the_host_allocates_and_the_host_agrees() {
        // Thirty directories holding an empty file each, no byte of content, under a 100 KiB
        // disk budget: `workspace/` takes 4 KiB, each directory 4 KiB and its file 512 bytes,
        // so 21 are copied and 9 named; an empty directory is not copied at all.
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        for i in 0..30 {
            fs::create_dir_all(ws.join(format!("d{i}"))).unwrap();
            fs::write(ws.join(format!("d{i}/f")), b"").unwrap();
        }
        fs::create_dir_all(ws.join("empty/deeper")).unwrap();
        let record = tmp.path().join("record");
        let mut budget = CopyBudget::for_record(Some(100 << 10));
        let report = copy_tree(
            &ws,
            &record.join("workspace"),
            "workspace",
            &|_| true,
            &mut budget,
        );
        assert_eq!((report.files, report.bytes), (21, 0), "{report:?}");
        assert_eq!(report.skipped_count, 9, "{report:?}");
        assert!(report
            .skipped
            .iter()
            .all(|s| s.ends_with("/f (byte budget: 4608 bytes, 1536 left)")));
        assert_eq!(budget.bytes(), 1536);
        assert!(!record.join("workspace/empty").exists());
        // The host counts the same: the record unpacks at the budget, not a byte under it.
        let mut bytes = Vec::new();
        tar_dir(&record, &mut bytes).unwrap();
        let limits = |max_bytes| crate::unpack::UnpackLimits {
            part: Some(crate::unpack::PartLimit {
                max_bytes,
                ..copies_limit(None)
            }),
            ..Default::default()
        };
        let used = (100 << 10) - 1536;
        let host = tmp.path().join("host");
        let unpacked = crate::unpack::unpack_tar(&bytes[..], &host, &limits(used), None);
        assert_eq!(unpacked.unwrap().dirs, 22);
        let refused = crate::unpack::unpack_tar(&bytes[..], &host, &limits(used - 1), None);
        assert!(refused.is_err());
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
            "transcripts",
            &|_| true,
            &mut CopyBudget::default(),
        );
        assert_eq!(report.files, 0);
        assert!(report.skipped[0].contains("is a symlink"), "{report:?}");
        assert!(!dst.exists());
        // The same directory reached without the link is copied.
        let report = copy_tree(
            &real,
            &dst,
            "transcripts",
            &|_| true,
            &mut CopyBudget::default(),
        );
        assert_eq!(report.files, 1);
    }

    /// Makes the directory `name` in `dir` and returns it opened (relative steps only).
    fn mkdir_in(dir: &std::os::fd::OwnedFd, name: &str) -> std::os::fd::OwnedFd {
        rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o755)).unwrap();
        bounded_tree::open_dir_at(dir.as_fd(), name.as_ref()).unwrap()
    }

    fn write_in(dir: &std::os::fd::OwnedFd, name: &str, data: &[u8]) {
        let fd = rustix::fs::openat(
            dir,
            name,
            OFlags::WRONLY | OFlags::CREATE,
            Mode::from_raw_mode(0o644),
        )
        .unwrap();
        File::from(fd).write_all(data).unwrap();
    }

    #[test]
    fn paths_near_the_limit_are_copied_longer_ones_named_and_the_record_unpacks() {
        // Below a source and a record directory whose own paths are long, `output/` holds a
        // ~3950-byte path (15 directories of 255-byte names) and one over 4096 bytes: the first
        // is copied although its full paths exceed PATH_MAX on both sides, the second is named.
        let tmp = tempfile::tempdir().unwrap();
        let mut base = fs::canonicalize(tmp.path()).unwrap();
        for i in 0..4 {
            base.push(format!("{i}{}", "b".repeat(200)));
        }
        let src = base.join("workspace/output");
        let dst = base.join("records/iteration-1/output");
        fs::create_dir_all(&src).unwrap();
        let name = "n".repeat(255);
        let mut dir = bounded_tree::open_dir(&src).unwrap();
        for _ in 0..15 {
            dir = mkdir_in(&dir, &name);
        }
        write_in(&dir, &"f".repeat(100), b"near the limit");
        let over = mkdir_in(&dir, &name);
        write_in(&over, "g", b"over");
        let report = copy_tree(&src, &dst, "output", &|_| true, &mut CopyBudget::default());
        assert_eq!(report.files, 1, "{report:?}");
        assert_eq!(report.skipped_count, 1, "{report:?}");
        assert!(
            report.skipped[0].ends_with("(path longer than 4096 bytes)"),
            "{report:?}"
        );
        let mut bytes = Vec::new();
        tar_dir(&dst, &mut bytes).unwrap();
        let out = base.join("host/iteration-1");
        let unpacked =
            crate::unpack::unpack_tar(&bytes[..], &out, &Default::default(), None).unwrap();
        assert_eq!(unpacked.files, 1);
        let mut fd = bounded_tree::open_dir(&out).unwrap();
        for _ in 0..15 {
            fd = bounded_tree::open_dir_at(fd.as_fd(), name.as_ref()).unwrap();
        }
        let f = rustix::fs::openat(&fd, "f".repeat(100).as_str(), OFlags::RDONLY, Mode::empty());
        let mut text = String::new();
        File::from(f.unwrap()).read_to_string(&mut text).unwrap();
        assert_eq!(text, "near the limit");
        bounded_tree::remove_path(&base).unwrap();
    }

    #[test]
    fn a_30000_deep_output_is_copied_to_the_path_limit_with_few_descriptors() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("output");
        fs::create_dir_all(&src).unwrap();
        let mut dir = bounded_tree::open_dir(&src).unwrap();
        for level in 1..=30_000 {
            dir = mkdir_in(&dir, "d");
            if level == 2000 {
                write_in(&dir, "f", b"within the limit");
            }
        }
        write_in(&dir, "bottom", b"beyond it");
        drop(dir);
        let dst = tmp.path().join("record/output");
        crate::bounded_tree::test_support::with_fd_limit(64, || {
            let report = copy_tree(&src, &dst, "output", &|_| true, &mut Default::default());
            let mut bytes = Vec::new();
            tar_dir(dst.parent().unwrap(), &mut bytes).map_err(|e| format!("tar: {e}"))?;
            let ok = report.files == 1
                && report.skipped_count == 1
                && report.skipped[0].ends_with("(path longer than 4096 bytes)");
            ok.then_some(()).ok_or_else(|| format!("{report:?}"))
        });
        // The record holds the chain down to the file.
        let mut depth = 0;
        let copied = bounded_tree::open_dir(&dst);
        if let Ok(mut fd) = copied {
            while let Ok(next) = bounded_tree::open_dir_at(fd.as_fd(), "d".as_ref()) {
                fd = next;
                depth += 1;
            }
        }
        bounded_tree::remove_path(&src).unwrap();
        bounded_tree::remove_path(&dst).unwrap();
        assert_eq!(depth, 2000);
    }
}
