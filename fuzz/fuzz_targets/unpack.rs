//! The tar unpacker (`pitcrew_core::unpack::unpack_tar`) on arbitrary bytes as a tar stream.
//!
//! Each input is unpacked into `<fresh dir>/dest` with small limits (half the inputs onto an
//! existing `dest`, to exercise the replacement). Afterwards:
//!
//! - nothing exists in the fresh directory but `dest`, and nothing was created in the sibling
//!   directory next to it (no escape);
//! - on success, `dest` holds only directories and regular files (no symlink, hard link, fifo,
//!   socket or device), with the modes the unpacker promises, exactly as many as reported, with
//!   the reported bytes, within the limits; each regular entry of the archive, read again
//!   independently, is a file under its checked path with its content;
//! - on refusal, an existing `dest` is untouched.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pitcrew_core::unpack::{check_entry_path, unpack_tar, PartLimit, UnpackLimits, UnpackReport};
use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const LIMITS: UnpackLimits = UnpackLimits {
    max_entries: 64,
    max_bytes: 256 * 1024,
    private: false,
    part: None,
};

/// The scratch root of this process: `<tmp>/run` is unpacked into, `<tmp>/outside` must stay
/// empty.
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("pitcrew-fuzz-unpack.")
            .tempdir()
            .expect("a scratch directory")
            .keep();
        fs::create_dir(dir.join("outside")).expect("outside directory");
        dir
    })
}

/// Names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = fs::read_dir(dir)
        .expect("readable directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

/// Walks `dir` without following links; checks every entry's type and mode, returns the
/// totals as a report.
fn walk(dir: &Path, limits: &UnpackLimits, totals: &mut UnpackReport) {
    for entry in fs::read_dir(dir).expect("readable directory") {
        let path = entry.expect("entry").path();
        let meta = fs::symlink_metadata(&path).expect("metadata");
        let mode = meta.permissions().mode() & 0o7777;
        let ft = meta.file_type();
        if ft.is_dir() {
            // Directories are created with the promised mode, which the umask may narrow.
            let want = if limits.private { 0o700 } else { 0o755 };
            assert_eq!(
                mode & !want,
                0,
                "{}: directory mode {mode:o}",
                path.display()
            );
            totals.dirs += 1;
            walk(&path, limits, totals);
        } else if ft.is_file() {
            let allowed: &[u32] = if limits.private {
                &[0o600, 0o700]
            } else {
                &[0o644, 0o755]
            };
            assert!(
                allowed.contains(&mode),
                "{}: file mode {mode:o}",
                path.display()
            );
            assert_eq!(meta.nlink(), 1, "{}: a hard link", path.display());
            totals.files += 1;
            totals.bytes += meta.len();
        } else {
            panic!("{}: neither a file nor a directory: {ft:?}", path.display());
        }
    }
}

/// Every regular entry of the archive, read again with the tar crate alone, is a file under
/// its checked path in `dest` with its content.
fn contents_match(data: &[u8], dest: &Path) {
    let mut archive = tar::Archive::new(data);
    let entries = archive.entries().expect("an unpacked archive reads again");
    for entry in entries {
        let mut entry = entry.expect("an unpacked entry reads again");
        if !matches!(
            entry.header().entry_type(),
            tar::EntryType::Regular | tar::EntryType::Continuous
        ) {
            continue;
        }
        let parts = check_entry_path(&entry.path_bytes()).expect("an unpacked path checks");
        let path = parts
            .iter()
            .fold(dest.to_path_buf(), |p, part| p.join(part));
        let mut want = Vec::new();
        entry.read_to_end(&mut want).expect("entry content");
        let got = fs::read(&path).expect("an unpacked file exists");
        assert_eq!(got, want, "{}: content differs", path.display());
    }
}

fuzz_target!(|data: &[u8]| {
    let root = scratch();
    let run = root.join("run");
    let _ = fs::remove_dir_all(&run);
    fs::create_dir(&run).expect("run directory");
    let dest = run.join("dest");
    let existing = data.len() % 2 == 1;
    if existing {
        fs::create_dir(&dest).expect("existing dest");
        fs::write(dest.join("stale"), b"old").expect("stale file");
    }
    let limits = UnpackLimits {
        private: data.len() % 4 >= 2,
        // A record's bound on what the agent left, as the host unpacks a record.
        part: (data.len() % 8 >= 4).then_some(PartLimit {
            dirs: &["output", "workspace"],
            // Counting entries as a file system allocates them: room for a few.
            max_bytes: if data.len() % 16 >= 8 { 32 << 10 } else { 1024 },
            entry_cost: data.len() % 16 >= 8,
        }),
        ..LIMITS
    };

    let result = unpack_tar(data, &dest, &limits, None);

    assert!(names(&root.join("outside")).is_empty(), "wrote outside");
    assert_eq!(
        names(root),
        ["outside".to_string(), "run".to_string()],
        "wrote next to the scratch root"
    );
    match result {
        Ok(report) => {
            assert_eq!(names(&run), ["dest".to_string()], "leftovers next to dest");
            let meta = fs::symlink_metadata(&dest).expect("dest exists");
            assert!(meta.is_dir());
            let want = if limits.private { 0o700 } else { 0o755 };
            assert_eq!(meta.permissions().mode() & 0o7777, want, "dest mode");
            let mut totals = UnpackReport::default();
            walk(&dest, &limits, &mut totals);
            assert_eq!(totals, report, "the report does not match what is on disk");
            assert!(report.files + report.dirs <= limits.max_entries);
            assert!(report.bytes <= limits.max_bytes);
            if let Some(part) = limits.part {
                let mut below = UnpackReport::default();
                for dir in part
                    .dirs
                    .iter()
                    .map(|d| dest.join(d))
                    .filter(|d| d.is_dir())
                {
                    walk(&dir, &limits, &mut below);
                }
                assert!(below.bytes <= part.max_bytes, "past the part limit");
            }
            contents_match(data, &dest);
        }
        Err(_) if existing => {
            assert_eq!(names(&run), ["dest".to_string()], "leftovers next to dest");
            assert_eq!(
                names(&dest),
                ["stale".to_string()],
                "a refusal changed dest"
            );
            assert_eq!(fs::read(dest.join("stale")).expect("stale"), b"old");
        }
        Err(_) => {
            assert!(names(&run).is_empty(), "a refusal left something behind");
        }
    }
    let _ = fs::remove_dir_all(&run);
});
