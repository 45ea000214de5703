use super::*;
use std::io::Write;

/// A tmpfs of this test's own (nextest runs each test in a process of its own, here in a mount
/// namespace of its own), so no other writer moves its used space; `None` (skipped) without
/// root.
fn private_tmpfs() -> Option<tempfile::TempDir> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    if !pitcrew_test_support::prerequisite(
        nix::unistd::geteuid().is_root(),
        "needs root to mount a private tmpfs",
    ) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let target = CString::new(dir.path().as_os_str().as_bytes()).unwrap();
    // SAFETY: unshare takes a flag word; mount reads NUL-terminated strings that outlive the
    // calls. Only this test's process (nextest runs one test per process) sees the change.
    unsafe {
        assert_eq!(libc::unshare(libc::CLONE_NEWNS), 0, "unshare");
        let private = libc::MS_REC | libc::MS_PRIVATE;
        let root = c"/";
        let none = std::ptr::null();
        let rc = libc::mount(none, root.as_ptr(), none, private, std::ptr::null());
        assert_eq!(rc, 0, "make / private");
        let tmpfs = c"tmpfs";
        let data = c"size=64m";
        let rc = libc::mount(
            tmpfs.as_ptr(),
            target.as_ptr(),
            tmpfs.as_ptr(),
            0,
            data.as_ptr().cast(),
        );
        assert_eq!(rc, 0, "mount tmpfs: {}", std::io::Error::last_os_error());
    }
    Some(dir)
}

fn write_mib(path: &Path, mib: usize) {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0x5a_u8; 1 << 20];
    for _ in 0..mib {
        f.write_all(&chunk).unwrap();
    }
    f.sync_all().unwrap();
}

#[test]
fn growth_past_the_budget_is_found_once_and_named() {
    let Some(dir) = private_tmpfs() else { return };
    let root = dir.path().display().to_string();
    let mut watch = DiskWatch::start(1 << 20, std::slice::from_ref(&root)).unwrap();
    assert!(!watch.sample());
    write_mib(&dir.path().join("big"), 16);
    assert!(watch.sample(), "16 MiB written past a 1 MiB budget");
    assert!(!watch.sample(), "found once");
    let reason = watch.reason().unwrap();
    assert!(
        reason.starts_with("disk-limit: the filesystem of "),
        "{reason}"
    );
    assert!(reason.contains("the agent's tree was killed"), "{reason}");
    let record = watch.record();
    assert!(record.exceeded);
    assert_eq!(record.file_size_limit, 1 << 20);
    assert!(record.filesystems[0].peak_growth >= 16 << 20, "{record:?}");
}

#[test]
fn growth_found_only_at_the_end_says_so() {
    let Some(dir) = private_tmpfs() else { return };
    let root = dir.path().display().to_string();
    let mut watch = DiskWatch::start(1 << 20, &[root]).unwrap();
    write_mib(&dir.path().join("big"), 16);
    watch.finish();
    let reason = watch.reason().unwrap();
    assert!(reason.contains("found after the agent ended"), "{reason}");
}

#[test]
fn freed_space_counts_back_and_one_filesystem_is_watched_once() {
    let Some(dir) = private_tmpfs() else { return };
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    let roots = [a.display().to_string(), b.display().to_string()];
    let mut watch = DiskWatch::start(1 << 40, &roots).unwrap();
    write_mib(&a.join("big"), 8);
    watch.sample();
    std::fs::remove_file(a.join("big")).unwrap();
    watch.finish();
    let record = watch.record();
    assert_eq!(record.filesystems.len(), 1, "{record:?}");
    assert_eq!(record.filesystems[0].root, roots[0]);
    assert!(record.filesystems[0].peak_growth >= 8 << 20, "{record:?}");
    assert!(record.filesystems[0].end_growth < 1 << 20, "{record:?}");
    assert!(!record.exceeded);
    assert_eq!(watch.reason(), None);
}

#[test]
fn a_root_behind_a_link_refuses_the_launch() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("real")).unwrap();
    std::os::unix::fs::symlink("real", dir.path().join("link")).unwrap();
    let root = dir.path().join("link").display().to_string();
    let err = DiskWatch::start(1 << 20, std::slice::from_ref(&root))
        .err()
        .unwrap();
    assert!(
        err.starts_with(&format!("disk budget: writable root {root}: ")),
        "{err}"
    );
}
