//! Collected iteration records on the host: a `collect` tar stream unpacked with the one safe
//! unpack rule both binaries share (`pitcrew_core::unpack`: no absolute paths, `..`, links,
//! devices, fifos or bad names; staged, then renamed), owner-only: a record holds what the
//! agent saw and wrote (prompts, transcripts, output), which is nobody else's to read. The
//! unpack creates every entry relative to its directory's descriptor, so a record whose entry
//! paths reach the 4096 bytes the supervisor lets through unpacks below a run directory of any
//! depth (the full path may exceed `PATH_MAX`).

use crate::collected_workspace::{self, WorkspaceReport};
use crate::engine::Connection;
use anyhow::{bail, Context as _};
use pitcrew_core::server::copies_limit;
use pitcrew_core::unpack::{unpack_tar, UnpackLimits};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

/// How a collected record is unpacked: the default limits, owner-only modes, and its copies of
/// what the agent left (`output/`, `transcripts/`, `workspace/`) within the supervisor's budget
/// for them under the disk budget `disk_bytes` (defence in depth: the supervisor never copies
/// more, so a record over it is refused, not cut). With `entry_cost`, each file and directory
/// there is counted as the supervisor counts it, at what the host's file system allocates for
/// it (a supervisor that lists `record.entry_cost`); otherwise only the files' content counts,
/// as an older supervisor counted it.
fn record_limits(disk_bytes: Option<u64>, entry_cost: bool) -> UnpackLimits {
    UnpackLimits {
        private: true,
        part: Some(pitcrew_core::unpack::PartLimit {
            entry_cost,
            ..copies_limit(disk_bytes)
        }),
        ..UnpackLimits::default()
    }
}

/// Collects `iteration` (default: the latest) into `dest` (created; must not exist). `disk_bytes`
/// is the harness's disk budget, when the caller knows it: with a supervisor that bounds a
/// record's copies by it (feature `record.disk_budget`), the unpack is bounded by it too.
/// Returns what was stripped from the record's `workspace/` ([`unpack_with`]).
pub fn collect_into(
    conn: &mut Connection,
    iteration: Option<u32>,
    dest: &Path,
    disk_bytes: Option<u64>,
) -> anyhow::Result<WorkspaceReport> {
    // An older supervisor bounds the copies by their fixed budget alone, or counts only their
    // files' content.
    let features = &conn.hello().capabilities;
    let disk_bytes = disk_bytes.filter(|_| features.has_feature("record.disk_budget"));
    let limits = record_limits(disk_bytes, features.has_feature("record.entry_cost"));
    let res = conn
        .client()
        .collect(iteration, |r| unpack_with(r, dest, &limits));
    res.map_err(|e| conn.explain(e))
}

/// Unpacks a record's tar stream `tar` (as `collect` sends it, or read from the sandbox's
/// storage) into `dest` (created; must not exist), with the same rule as [`collect_into`]
/// without a disk budget, counting only the copies' file content: the supervisor that wrote a
/// stored record, and how it counted, is not known.
pub fn unpack_record(tar: &mut dyn std::io::Read, dest: &Path) -> anyhow::Result<WorkspaceReport> {
    unpack_with(tar, dest, &record_limits(None, false))
}

/// Unpacks the record `tar` into `dest` within `limits`, then strips its `workspace/` of what
/// git would run on the host ([`collected_workspace::strip`]) and notes what was stripped in
/// its `result.json`. A record whose workspace could be neither checked nor removed is removed
/// whole.
fn unpack_with(
    tar: &mut dyn std::io::Read,
    dest: &Path,
    limits: &UnpackLimits,
) -> anyhow::Result<WorkspaceReport> {
    unpack_tar(tar, dest, limits, None)
        .with_context(|| format!("{}: unpacking the record", dest.display()))?;
    let stripped = collected_workspace::strip(&dest.join("workspace")).and_then(|report| {
        note_in_record(dest, &report)?;
        Ok(report)
    });
    if stripped.is_err() {
        if let Err(e) = pitcrew_core::bounded_tree::remove_path(dest) {
            tracing::error!("{}: remove the unchecked record: {e}", dest.display());
        }
    }
    stripped
}

/// Writes what [`collected_workspace::strip`] removed and flagged into the record's
/// `result.json` in `dest` (`workspace_stripped`, `workspace_flagged`): appended before its
/// closing brace, so the supervisor's order of fields stays; whatever the supervisor wrote
/// under those names is replaced. A record without a readable `result.json` is left alone (its
/// reader says so).
fn note_in_record(dest: &Path, report: &WorkspaceReport) -> anyhow::Result<()> {
    const STRIPPED: &str = "workspace_stripped";
    const FLAGGED: &str = "workspace_flagged";
    let path = dest.join("result.json");
    let Ok(bytes) = std::fs::read(&path) else {
        return Ok(());
    };
    let Ok(serde_json::Value::Object(mut doc)) = serde_json::from_slice(&bytes) else {
        return Ok(());
    };
    let mut notes = serde_json::Map::new();
    for (key, list) in [(STRIPPED, &report.stripped), (FLAGGED, &report.flagged)] {
        if !list.is_empty() {
            notes.insert(key.into(), list.clone().into());
        }
    }
    let said = doc.contains_key(STRIPPED) || doc.contains_key(FLAGGED);
    let text = if said {
        doc.remove(STRIPPED);
        doc.remove(FLAGGED);
        doc.extend(notes);
        let mut text = serde_json::to_vec(&doc)?;
        text.push(b'\n');
        text
    } else if notes.is_empty() {
        return Ok(());
    } else {
        let end = bytes
            .iter()
            .rposition(|&b| b == b'}')
            .context("result.json: not an object")?;
        let notes = serde_json::to_vec(&serde_json::Value::Object(notes))?;
        let mut text = bytes[..end].to_vec();
        if !doc.is_empty() {
            text.push(b',');
        }
        // `{"workspace_stripped":…}` without its opening brace.
        text.extend_from_slice(&notes[1..]);
        text.push(b'\n');
        text
    };
    // Replaced whole: a host that dies mid-write leaves the supervisor's record, not half of one.
    pitcrew_core::record::write_result_file(&path, &text)
        .with_context(|| format!("{}: rewrite", path.display()))
}

/// How many times one component of the records directory is created before giving up.
const ATTEMPTS: usize = 3;

fn dir_flags() -> OFlags {
    OFlags::PATH | OFlags::NOFOLLOW | OFlags::DIRECTORY | OFlags::CLOEXEC
}

/// Opens (creating it when missing) the run directory `<output>/<run_id>` below the harness
/// directory `base`, one component at a time with `openat(O_NOFOLLOW)`: a symlink or a
/// non-directory anywhere below `base` is refused with its path, so records never land outside
/// the harness directory, whatever was planted there since validation (the harness `validation:`
/// command runs on the host between iterations). Returns the path and an `O_PATH` descriptor of
/// the directory that was checked.
pub fn open_run_dir(
    base: &Path,
    output: &Path,
    run_id: &str,
) -> anyhow::Result<(PathBuf, OwnedFd)> {
    let rel = output.strip_prefix(base).with_context(|| {
        format!(
            "output {}: not inside the harness directory {}",
            output.display(),
            base.display()
        )
    })?;
    let mut names = Vec::new();
    for component in rel.components().chain([Component::Normal(run_id.as_ref())]) {
        match component {
            Component::Normal(name) => names.push(name),
            Component::CurDir => {}
            _ => bail!(
                "output {}: only plain names below the harness directory",
                output.display()
            ),
        }
    }
    let mut dir = rustix::fs::open(
        base,
        OFlags::DIRECTORY | OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .with_context(|| format!("{}: open the harness directory", base.display()))?;
    let mut reached = base.to_path_buf();
    for name in names {
        reached.push(name);
        let mut attempts = 0;
        dir = loop {
            attempts += 1;
            if attempts > ATTEMPTS {
                bail!(
                    "output {}: changed {ATTEMPTS} times while being created",
                    reached.display()
                );
            }
            match rustix::fs::openat(&dir, name, dir_flags(), Mode::empty()) {
                Ok(fd) => break fd,
                Err(Errno::NOENT) => {
                    match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => bail!("output {}: create: {e}", reached.display()),
                    }
                }
                Err(err) => {
                    let what = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                        Ok(st) => match FileType::from_raw_mode(st.st_mode) {
                            FileType::Symlink => "a symlink",
                            FileType::Directory => "",
                            _ => "not a directory",
                        },
                        Err(_) => "",
                    };
                    if what.is_empty() {
                        bail!("output {}: {err}", reached.display());
                    }
                    bail!(
                        "output {} is {what}: records are written only to real directories inside \
                         the harness directory {} (links are not followed)",
                        reached.display(),
                        base.display()
                    );
                }
            }
        };
    }
    Ok((reached, dir))
}

/// Writes `name` in the directory `dir` (from [`open_run_dir`]) without following a link
/// planted under that name.
pub fn write_in(dir: &OwnedFd, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )?;
    std::fs::File::from(fd).write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
    fn attack_output_path__a_run_dir_below_a_symlink_is_never_created() {
        let harness = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(harness.path()).unwrap();
        let outside = tempfile::tempdir().unwrap();
        // `runs` planted as a link to a directory outside, after validation.
        std::os::unix::fs::symlink(outside.path(), base.join("runs")).unwrap();
        let err = open_run_dir(&base, &base.join("runs"), "r1").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "output {} is a symlink: records are written only to real directories inside the harness directory {} (links are not followed)",
                base.join("runs").display(),
                base.display()
            )
        );
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        // A link as the run directory itself, or deeper, is refused the same way.
        std::fs::remove_file(base.join("runs")).unwrap();
        std::fs::create_dir_all(base.join("runs/a")).unwrap();
        std::os::unix::fs::symlink(outside.path(), base.join("runs/a/r1")).unwrap();
        let err = open_run_dir(&base, &base.join("runs/a"), "r1").unwrap_err();
        assert!(err.to_string().contains("r1 is a symlink"), "{err}");
        std::fs::write(base.join("runs/file"), b"x").unwrap();
        let err = open_run_dir(&base, &base.join("runs/file/x"), "r1").unwrap_err();
        assert!(err.to_string().contains("file is not a directory"), "{err}");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    #[test]
    fn the_run_dir_is_created_and_files_are_written_without_following_links() {
        let harness = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(harness.path()).unwrap();
        let (path, dir) = open_run_dir(&base, &base.join("./out/records"), "r1").unwrap();
        assert_eq!(path, base.join("out/records/r1"));
        assert!(path.is_dir());
        // Again: it exists now, and opening it is fine.
        open_run_dir(&base, &base.join("out/records"), "r1").unwrap();
        write_in(&dir, "run.json", b"{}").unwrap();
        assert_eq!(std::fs::read(path.join("run.json")).unwrap(), b"{}");
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("victim");
        std::fs::write(&target, b"keep").unwrap();
        std::fs::remove_file(path.join("run.json")).unwrap();
        std::os::unix::fs::symlink(&target, path.join("run.json")).unwrap();
        assert!(write_in(&dir, "run.json", b"{}").is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    }

    #[test]
    fn records_become_owner_only() {
        use std::fs;
        use std::os::unix::fs::PermissionsExt as _;
        // A record as `collect` streams it: a file, an executable in a subdirectory.
        let mut b = tar::Builder::new(Vec::new());
        for (path, mode, data) in [
            ("result.json", 0o644, &b"{}"[..]),
            ("output/sub/tool", 0o755, &b"#!/bin/sh\n"[..]),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(mode);
            h.set_entry_type(tar::EntryType::Regular);
            b.append_data(&mut h, path, data).unwrap();
        }
        let bytes = b.into_inner().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("iteration-1");
        unpack_tar(&bytes[..], &d, &record_limits(None, true), None).unwrap();
        let mode = |p: &str| fs::metadata(d.join(p)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(""), 0o700);
        assert_eq!(mode("result.json"), 0o600);
        assert_eq!(mode("output/sub"), 0o700);
        assert_eq!(mode("output/sub/tool"), 0o700);
    }

    #[test]
    fn a_collected_workspace_is_stripped_and_the_record_says_so_whatever_the_supervisor_said() {
        use std::fs;
        // A record as a hostile supervisor could stream it: a hook given the execute bit, a
        // configuration that runs a command, and its own claim that nothing was stripped.
        let record = |result: &str| {
            let mut b = tar::Builder::new(Vec::new());
            for (path, mode, data) in [
                ("result.json", 0o644, result.as_bytes()),
                ("workspace/.git/HEAD", 0o644, b"ref: refs/heads/main\n"),
                ("workspace/.git/hooks/post-checkout", 0o755, b"#!/bin/sh\n"),
                (
                    "workspace/.git/config",
                    0o644,
                    b"[core]\n\tfsmonitor = x\n\tbare = false\n",
                ),
            ] {
                let mut h = tar::Header::new_gnu();
                h.set_size(data.len() as u64);
                h.set_mode(mode);
                h.set_entry_type(tar::EntryType::Regular);
                b.append_data(&mut h, path, data).unwrap();
            }
            b.into_inner().unwrap()
        };
        let tmp = tempfile::tempdir().unwrap();
        let stripped = [".git/hooks/post-checkout", ".git/config: core.fsmonitor"];
        // The supervisor's order of fields stays; the host's notes come last.
        let d = tmp.path().join("iteration-1");
        let report =
            unpack_record(&mut &record("{\"iteration\":1,\"exit_code\":0}\n")[..], &d).unwrap();
        assert_eq!(report.stripped, stripped);
        assert_eq!(
            fs::read_to_string(d.join("result.json")).unwrap(),
            "{\"iteration\":1,\"exit_code\":0,\"workspace_stripped\":[\".git/hooks/post-checkout\",\
             \".git/config: core.fsmonitor\"]}\n"
        );
        assert!(!d.join("workspace/.git/hooks/post-checkout").exists());
        assert_eq!(
            fs::read_to_string(d.join("workspace/.git/config")).unwrap(),
            "[core]\n\tbare = \"false\"\n"
        );
        // What the supervisor claims is replaced.
        let d = tmp.path().join("iteration-2");
        let claim = "{\"iteration\":2,\"workspace_stripped\":[],\"workspace_flagged\":[\"x\"]}";
        unpack_record(&mut &record(claim)[..], &d).unwrap();
        let doc: serde_json::Value =
            serde_json::from_slice(&fs::read(d.join("result.json")).unwrap()).unwrap();
        assert_eq!(
            doc,
            serde_json::json!({"iteration": 2, "workspace_stripped": stripped})
        );
    }

    /// A tar of regular files (path, length), without directory entries: the unpack creates
    /// the directories on the way, and charges them all the same.
    fn files_tar(entries: &[(String, usize)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, len) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_size(*len as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            b.append_data(&mut h, path, &vec![b'z'; *len][..]).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn the_copies_of_a_record_past_its_disk_budget_are_refused() {
        // Under a 1 MiB disk budget the supervisor copies at most 1 MiB into `output/`,
        // `transcripts/` and `workspace/` together, each file in whole 4 KiB blocks and each
        // directory 4 KiB; the captured streams are bounded apart.
        let mut entries: Vec<(String, usize)> = [
            ("result.json", 2),
            ("output.jsonl", 1536 << 10),
            ("output/a", 600 << 10),
            ("workspace/b", (424 << 10) - 8192 - 100),
        ]
        .map(|(p, n)| (p.to_string(), n))
        .to_vec();
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("iteration-1");
        let bytes = files_tar(&entries);
        unpack_tar(&bytes[..], &dest, &record_limits(Some(1 << 20), true), None).unwrap();
        entries.push(("transcripts/c.jsonl".into(), 1));
        let bytes = files_tar(&entries);
        let other = tmp.path().join("iteration-2");
        let limits = record_limits(Some(1 << 20), true);
        let err = unpack_with(&mut &bytes[..], &other, &limits).unwrap_err();
        let err = format!("{err:#}");
        assert!(
            err.contains(
                "\"transcripts/c.jsonl\" refused: more than 1048576 bytes of files and \
                 directories (each counted in whole 4096-byte blocks) below output/, \
                 transcripts/, workspace/"
            ),
            "{err}"
        );
        assert!(!other.exists());
        // Without a disk budget the fixed 1 GiB holds.
        unpack_with(&mut &bytes[..], &other, &record_limits(None, true)).unwrap();
    }

    #[test]
    fn directories_of_empty_files_count_against_the_disk_budget_on_the_host() {
        // 230 directories holding an empty file each below `workspace/`: no byte of file
        // content, but 230 blocks and 230 inodes (1 MiB and more) on the host's file system.
        let entries: Vec<(String, usize)> =
            (0..230).map(|i| (format!("workspace/d{i}/f"), 0)).collect();
        let bytes = files_tar(&entries);
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("iteration-1");
        let err =
            unpack_with(&mut &bytes[..], &dest, &record_limits(Some(1 << 20), true)).unwrap_err();
        assert!(
            format!("{err:#}").contains("more than 1048576 bytes of files and directories"),
            "{err:#}"
        );
        assert!(!dest.exists());
        // 200 of them fit: 4096 for `workspace/`, 4096 + 512 for each.
        let bytes = files_tar(&entries[..200]);
        let report = unpack_tar(&bytes[..], &dest, &record_limits(Some(1 << 20), true), None);
        assert_eq!(report.unwrap().dirs, 201);
        // From a supervisor that does not list `record.entry_cost`, only content counts.
        let bytes = files_tar(&entries);
        let other = tmp.path().join("iteration-2");
        unpack_with(
            &mut &bytes[..],
            &other,
            &record_limits(Some(1 << 20), false),
        )
        .unwrap();
    }

    #[test]
    fn a_record_with_paths_near_the_limit_unpacks_below_a_deep_run_dir() {
        use std::os::fd::AsFd as _;
        // The run directory's own path (~2000 bytes) plus an entry of ~4050 bytes: over
        // PATH_MAX as a full path, yet the record arrives whole.
        let tmp = tempfile::tempdir().unwrap();
        let mut run_dir = tmp.path().to_path_buf();
        for i in 0..8 {
            run_dir.push(format!("{i}{}", "r".repeat(240)));
        }
        let name = "n".repeat(255);
        let deep: String = (0..15).map(|_| format!("{name}/")).collect();
        let entry = format!("output/{deep}{}", "f".repeat(200));
        assert!(entry.len() > 4000 && entry.len() <= pitcrew_core::unpack::MAX_PATH_LEN);
        let mut b = tar::Builder::new(Vec::new());
        for (path, data) in [("result.json", &b"{}"[..]), (entry.as_str(), &b"deep"[..])] {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            b.append_data(&mut h, path, data).unwrap();
        }
        let bytes = b.into_inner().unwrap();
        let dest = run_dir.join("iteration-1");
        unpack_tar(&bytes[..], &dest, &record_limits(None, true), None).unwrap();
        assert_eq!(std::fs::read(dest.join("result.json")).unwrap(), b"{}");
        let mut dir = pitcrew_core::bounded_tree::open_dir(&dest.join("output")).unwrap();
        for _ in 0..15 {
            dir = pitcrew_core::bounded_tree::open_dir_at(dir.as_fd(), name.as_ref()).unwrap();
        }
        let f = rustix::fs::openat(
            &dir,
            "f".repeat(200).as_str(),
            OFlags::RDONLY,
            Mode::empty(),
        );
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(f.unwrap()), &mut text).unwrap();
        assert_eq!(text, "deep");
        pitcrew_core::bounded_tree::remove_path(&dest).unwrap();
    }
}
