//! Unit tests of `bounded_tree`.

use super::test_support::with_fd_limit;
use super::*;
use std::fs;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::symlink;
use std::path::PathBuf;

/// Builds a chain of `depth` directories named `d` below `top` (relative steps, so the full
/// path may exceed `PATH_MAX`) with a file and a symlink at the bottom.
fn chain(top: &Path, depth: usize) {
    fs::create_dir_all(top).unwrap();
    let mut dir = open_dir(top).unwrap();
    for _ in 0..depth {
        rustix::fs::mkdirat(&dir, "d", Mode::from_raw_mode(0o755)).unwrap();
        dir = open_dir_at(dir.as_fd(), OsStr::new("d")).unwrap();
    }
    let f = rustix::fs::openat(
        &dir,
        "bottom.txt",
        OFlags::WRONLY | OFlags::CREATE,
        Mode::from_raw_mode(0o644),
    )
    .unwrap();
    drop(f);
    rustix::fs::symlinkat("/etc", &dir, "link").unwrap();
}

/// A temp dir removed with [`remove_path`] (the recursive removal of `TempDir` would run
/// out of stack on a deep chain a failed test left behind).
struct Scratch(tempfile::TempDir);

impl Scratch {
    fn new() -> Scratch {
        Scratch(tempfile::tempdir().unwrap())
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = remove_path(self.0.path());
    }
}

fn open_fds() -> usize {
    fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

#[test]
fn walks_and_removes_a_30000_deep_chain_with_64_descriptors() {
    let tmp = Scratch::new();
    let top = tmp.path().join("top");
    chain(&top, 30_000);
    with_fd_limit(64, || {
        // Walked to the bottom first, then removed.
        let root = open_dir(&top).map_err(|e| e.to_string())?;
        let mut walk = Walk::new(root, "top", u64::MAX).map_err(|e| e.to_string())?;
        let (mut entries, mut deepest) = (0, 0);
        while let Some(step) = walk.next() {
            let Step::Entry(e) = step.map_err(|e| e.to_string())? else {
                return Err("limit".into());
            };
            entries += 1;
            deepest = deepest.max(e.depth);
            if e.file_type() == FileType::Directory {
                walk.enter().map_err(|e| e.to_string())?;
            }
        }
        if (entries, deepest) != (30_002, 30_000) {
            return Err(format!("walked {entries} entries, {deepest} deep"));
        }
        let removed = remove_path(&top).map_err(|e| e.to_string())?;
        // 30000 directories, the top one, a file and a link.
        if removed != 30_003 {
            return Err(format!("removed {removed}"));
        }
        Ok(())
    });
    assert!(fs::symlink_metadata(&top).is_err());
    assert!(Path::new("/etc/passwd").exists());
}

#[test]
fn removal_never_follows_links_and_counts_what_it_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let keep = tmp.path().join("keep");
    fs::create_dir(&keep).unwrap();
    fs::write(keep.join("precious"), b"x").unwrap();
    let top = tmp.path().join("top");
    fs::create_dir_all(top.join("a/b/c")).unwrap();
    fs::write(top.join("a/b/c/f"), b"1").unwrap();
    fs::write(top.join("a/g"), b"2").unwrap();
    fs::create_dir(top.join("empty")).unwrap();
    symlink(&keep, top.join("a/b/to-keep")).unwrap();
    symlink(&keep, top.join("link-dir")).unwrap();
    let removed = remove_path(&top).unwrap();
    // top, a, b, c, f, g, empty, two links.
    assert_eq!(removed, 9);
    assert!(!top.exists());
    assert!(keep.join("precious").is_file());
    // A symlink given as the path is removed itself.
    symlink(&keep, tmp.path().join("l")).unwrap();
    assert_eq!(remove_path(&tmp.path().join("l")).unwrap(), 1);
    assert!(keep.join("precious").is_file());
    // Nothing there: nothing removed.
    assert_eq!(remove_path(&tmp.path().join("absent")).unwrap(), 0);
    assert!(remove_path(Path::new("/")).is_err());
    assert!(remove_path(&tmp.path().join("a/..")).is_err());
}

#[test]
fn a_directory_moved_out_during_a_walk_stops_it() {
    // Coming back up through `..` must reach the directory the walk came down from: a
    // directory an attacker moved elsewhere (here `top/a/b` to `outside/b`) is caught, and
    // the walk does not carry on in `outside`.
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path().join("top");
    fs::create_dir_all(top.join("a/b")).unwrap();
    let outside = tmp.path().join("outside");
    fs::create_dir(&outside).unwrap();
    let mut stack = DirStack::new(open_dir(&top).unwrap()).unwrap();
    stack.enter(OsStr::new("a")).unwrap();
    stack.enter(OsStr::new("b")).unwrap();
    fs::rename(top.join("a/b"), outside.join("b")).unwrap();
    // Descriptors closed, as they are beyond `OPEN_DIRS` levels: the pop goes through `..`.
    for level in &mut stack.above {
        level.1 = None;
    }
    let err = stack.pop().unwrap_err();
    assert!(err.to_string().contains("moved"), "{err}");
}

#[test]
fn a_walk_never_enters_another_file_system() {
    // `/proc` is another file system than `/`.
    let mut stack = DirStack::new(open_dir(Path::new("/")).unwrap()).unwrap();
    let err = stack.enter(OsStr::new("proc")).unwrap_err();
    assert!(err.to_string().contains("another file system"), "{err}");
    assert_eq!(stack.depth(), 0);
}

/// Unmounts its path when dropped.
struct Mounted(std::ffi::CString);

impl Drop for Mounted {
    fn drop(&mut self) {
        // SAFETY: umount2 with a NUL-terminated path.
        unsafe { libc::umount2(self.0.as_ptr(), libc::MNT_DETACH) };
    }
}

#[test]
fn a_removal_never_crosses_into_another_file_system() {
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path().join("top");
    let m = top.join("a/mnt");
    fs::create_dir_all(&m).unwrap();
    let path = std::ffi::CString::new(m.as_os_str().as_bytes()).unwrap();
    // SAFETY: mount with NUL-terminated strings and no data.
    let rc = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            path.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        pitcrew_test_support::skip(&format!(
            "mounting a tmpfs needs root in the initial mount namespace: {}",
            io::Error::last_os_error()
        ));
        return;
    }
    let _mounted = Mounted(path);
    fs::write(m.join("other-fs"), b"x").unwrap();
    let err = remove_path(&top).unwrap_err();
    assert!(err.to_string().contains("another file system"), "{err}");
    assert!(err.to_string().contains("/a/mnt"), "{err}");
    assert!(m.join("other-fs").is_file());
}

#[test]
fn walks_in_name_order_at_depth_with_bounded_descriptors() {
    let tmp = Scratch::new();
    let top = tmp.path().join("top");
    fs::create_dir_all(top.join("b/y")).unwrap();
    fs::create_dir_all(top.join("a")).unwrap();
    fs::write(top.join("a/2"), b"").unwrap();
    fs::write(top.join("a/1"), b"").unwrap();
    fs::write(top.join("c"), b"").unwrap();
    chain(&top.join("b/y"), 3000);
    let before = open_fds();
    let mut walk = Walk::new(open_dir(&top).unwrap(), "top", u64::MAX).unwrap();
    let mut seen = Vec::new();
    let mut deepest = 0;
    let mut most_fds = 0;
    while let Some(step) = walk.next() {
        let Step::Entry(e) = step.unwrap() else {
            panic!("limit")
        };
        deepest = deepest.max(e.depth);
        most_fds = most_fds.max(open_fds());
        if e.file_type() == FileType::Directory {
            walk.enter().unwrap();
        }
        if e.depth < 3 {
            seen.push(e.rel.display().to_string());
        }
    }
    assert_eq!(seen, ["a", "a/1", "a/2", "b", "b/y", "b/y/d", "c"]);
    assert_eq!(deepest, 3002);
    // One per level would be 3000 and more.
    assert!(
        most_fds <= before + OPEN_DIRS + 8,
        "{most_fds} descriptors open (before: {before})"
    );
}

#[test]
fn a_walks_limit_bounds_what_it_returns_and_keeps() {
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path().join("top");
    fs::create_dir_all(top.join("a")).unwrap();
    for i in 0..50 {
        fs::write(top.join(format!("a/{i:02}")), b"").unwrap();
        fs::write(top.join(format!("z{i:02}")), b"").unwrap();
    }
    let mut walk = Walk::new(open_dir(&top).unwrap(), "top", 5).unwrap();
    let mut seen = Vec::new();
    let mut limit = None;
    while let Some(step) = walk.next() {
        match step.unwrap() {
            Step::Entry(e) => {
                if e.file_type() == FileType::Directory {
                    walk.enter().unwrap();
                }
                seen.push(e.rel.display().to_string());
                let kept: usize = walk.pending.iter().map(Vec::len).sum();
                assert!(kept as u64 <= walk.left() + 1, "{kept} names kept");
            }
            Step::Limit(rel) => limit = Some(rel),
        }
    }
    assert_eq!(seen, ["a", "a/00", "a/01", "a/02", "a/03"]);
    assert_eq!(limit, Some(PathBuf::from("a/04")));
    assert_eq!(walk.left(), 0);
}

#[test]
fn the_walk_reports_symlinks_and_never_enters_them() {
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path().join("top");
    fs::create_dir(&top).unwrap();
    symlink("/etc", top.join("etc")).unwrap();
    let mut walk = Walk::new(open_dir(&top).unwrap(), "top", 10).unwrap();
    let Some(Ok(Step::Entry(e))) = walk.next() else {
        panic!("no entry")
    };
    assert_eq!(e.file_type(), FileType::Symlink);
    assert!(walk.enter().is_err());
    assert!(walk.next().is_none());
    // Opening a link as a directory fails too.
    assert!(open_dir(&top.join("etc")).is_err());
}

#[test]
fn errors_name_deep_entries_within_a_bounded_message() {
    let mut trail = Trail::new("/base/");
    for _ in 0..5000 {
        trail.push(OsStr::new("dd"));
    }
    let at = trail.at(Some(OsStr::new("leaf")));
    assert!(at.starts_with("/base/dd/dd/"), "{at}");
    assert!(at.ends_with("more levels)…/leaf"), "{at}");
    assert!(at.len() < TRAIL_BYTES + 100, "{}", at.len());
    for _ in 0..5000 {
        trail.pop();
    }
    assert_eq!(trail.at(None), "/base");
    assert_eq!(Trail::new("/").at(Some(OsStr::new("x"))), "/x");
}
