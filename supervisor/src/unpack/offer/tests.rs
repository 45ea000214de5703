//! Unit tests of offered uploads: what is reused, what is asked for, and what is refused.

use super::*;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};

/// A tree to offer: directories and `(path, content, exec)` files, in listing order.
struct Tree {
    dirs: Vec<&'static str>,
    files: Vec<(&'static str, Vec<u8>, bool)>,
}

impl Tree {
    fn listing(&self) -> Vec<u8> {
        let mut out = String::new();
        for d in &self.dirs {
            out.push_str(&dir_line(d));
        }
        for (path, data, exec) in &self.files {
            let file = ListedFile {
                sha256: Sha256::digest(data).into(),
                size: data.len() as u64,
                exec: *exec,
            };
            out.push_str(&file_line(path, &file));
        }
        out.into_bytes()
    }

    /// The tar stream of the files the bitmap asks for, in listing order.
    fn tar_needed(&self, bitmap: &[u8]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (n, (path, data, _)) in self.files.iter().enumerate() {
            if needed(bitmap, n) {
                append(&mut b, path, data);
            }
        }
        b.into_inner().unwrap()
    }
}

fn append(b: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8]) {
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    b.append_data(&mut h, path, data).unwrap();
}

fn sample() -> Tree {
    Tree {
        dirs: vec!["a", "a/b", "empty"],
        files: vec![
            ("a/one", b"one".to_vec(), false),
            ("a/b/two", vec![7u8; 300_000], true),
            ("a/b/three", b"three".to_vec(), false),
            ("top", b"one".to_vec(), false),
        ],
    }
}

/// Offers `tree` for `dest` and sends what is asked for; returns the report and the bitmap.
fn offer(dest: &Path, tree: &Tree) -> (OfferReport, Vec<u8>) {
    let limits = UnpackLimits::default();
    let mut a = Assembly::prepare(dest, &tree.listing(), &limits, None).unwrap();
    let bitmap = a.need_bitmap().to_vec();
    a.receive(&tree.tar_needed(&bitmap)[..]).unwrap();
    (a.finish().unwrap(), bitmap)
}

/// A fifo at `path` (what the agent may leave where a file was).
pub(super) fn make_fifo(path: impl AsRef<Path>) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path.as_ref(),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
}

fn names(parent: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(parent)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_first_offer_asks_for_each_content_once_and_builds_the_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("tree");
    let (report, bitmap) = offer(&dest, &sample());
    // `top` has the content of `a/one`: copied, not sent.
    assert_eq!(
        (0..4).map(|n| needed(&bitmap, n)).collect::<Vec<_>>(),
        [true, true, true, false]
    );
    assert_eq!(
        (
            report.files,
            report.sent_files,
            report.duplicate_files,
            report.reused_files
        ),
        (4, 3, 1, 0)
    );
    assert_eq!(fs::read(dest.join("top")).unwrap(), b"one");
    assert_eq!(fs::read(dest.join("a/b/two")).unwrap().len(), 300_000);
    assert!(dest.join("empty").is_dir());
    let mode = |p: &str| fs::metadata(dest.join(p)).unwrap().mode() & 0o7777;
    assert_eq!(
        (mode("a/b/two"), mode("top"), mode("a")),
        (0o755, 0o644, 0o755)
    );
    assert_eq!(names(tmp.path()), ["tree"]);
}

#[test]
fn a_tree_is_kept_only_while_each_file_has_its_listed_type_mode_owner_and_size() {
    // Each change below, made to a destination that holds the tree exactly, must make the next
    // offer assemble it again (the type: a fifo is refused by its directory entry, before any
    // open; a directory by the fstat of what was opened).
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("tree");
    let tree = sample();
    offer(&dest, &tree);
    assert!(offer(&dest, &tree).0.kept);
    fn chmod(path: &Path, mode: u32) {
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap()
    }
    /// What is changed, and how, in the destination.
    type Change = (&'static str, Box<dyn Fn(&Path)>);
    let mut changes: Vec<Change> = vec![
        ("mode", Box::new(|d| chmod(&d.join("a/one"), 0o600))),
        ("execute bit", Box::new(|d| chmod(&d.join("top"), 0o755))),
        (
            "size",
            Box::new(|d| {
                let mut f = fs::OpenOptions::new()
                    .append(true)
                    .open(d.join("a/b/three"))
                    .unwrap();
                f.write_all(b"!").unwrap();
            }),
        ),
        (
            "a fifo in a file's place",
            Box::new(|d| {
                fs::remove_file(d.join("a/one")).unwrap();
                make_fifo(d.join("a/one"));
            }),
        ),
        (
            "a directory in a file's place",
            Box::new(|d| {
                fs::remove_file(d.join("top")).unwrap();
                fs::create_dir(d.join("top")).unwrap();
            }),
        ),
    ];
    if rustix::process::geteuid().is_root() {
        changes.push((
            "owner",
            Box::new(|d| std::os::unix::fs::chown(d.join("a/one"), Some(1), Some(1)).unwrap()),
        ));
    }
    for (what, change) in changes {
        change(&dest);
        let (report, _) = offer(&dest, &tree);
        assert!(!report.kept, "{what}: {report:?}");
        assert!(offer(&dest, &tree).0.kept, "{what}: once assembled again");
    }
}

#[test]
fn the_kept_check_never_opens_a_fifo_left_in_a_files_place() {
    // A writer blocked opening the fifo would be let through by any reader's open.
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("tree");
    let tree = sample();
    offer(&dest, &tree);
    let fifo = dest.join("a/one");
    fs::remove_file(&fifo).unwrap();
    make_fifo(&fifo);
    let (opened, writer_in) = std::sync::mpsc::channel();
    let path = fifo.clone();
    let writer = std::thread::spawn(move || {
        let _f = fs::OpenOptions::new().write(true).open(&path).unwrap();
        let _ = opened.send(());
    });
    let limits = UnpackLimits::default();
    let items = parse(&tree.listing(), &limits).unwrap();
    let verdict = kept::holds_exactly(&dest, &items, &limits, moving::own_ids().unwrap(), 4096);
    assert!(!verdict.exact);
    let was_opened = writer_in
        .recv_timeout(std::time::Duration::from_millis(300))
        .is_ok();
    // Let the writer go.
    let _reader = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    writer.join().unwrap();
    assert!(!was_opened, "the kept check opened the fifo");
}

#[test]
fn an_unchanged_tree_is_asked_for_nothing_and_three_changed_files_for_three() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("tree");
    let mut tree = sample();
    offer(&dest, &tree);
    let before = fs::metadata(dest.join("a/b/two")).unwrap();

    let (report, bitmap) = offer(&dest, &tree);
    assert!(bitmap.iter().all(|&b| b == 0), "{bitmap:?}");
    assert_eq!((report.sent_files, report.reused_files), (0, 4));
    // The destination holds exactly the tree: kept as it is.
    assert!(report.kept, "{report:?}");
    let after = fs::metadata(dest.join("a/b/two")).unwrap();
    assert_eq!((before.ino(), after.nlink()), (after.ino(), 1));

    // An entry the listing does not have: assembled again, the files moved (ours, one link).
    fs::write(dest.join("a/extra"), b"x").unwrap();
    let (report, _) = offer(&dest, &tree);
    assert_eq!(
        (report.kept, report.moved_files, report.sent_files),
        (false, 3, 0)
    );
    assert!(!dest.join("a/extra").exists());
    let after = fs::metadata(dest.join("a/b/two")).unwrap();
    assert_eq!(before.ino(), after.ino());

    // A file with a second name is copied: a new inode, the other name keeps the old one.
    let other = tmp.path().join("other-name");
    fs::hard_link(dest.join("a/b/two"), &other).unwrap();
    let (report, _) = offer(&dest, &tree);
    assert_eq!((report.reused_files, report.moved_files), (3, 2));
    let after = fs::metadata(dest.join("a/b/two")).unwrap();
    assert_ne!(fs::metadata(&other).unwrap().ino(), after.ino());
    assert_eq!(after.nlink(), 1);
    fs::remove_file(&other).unwrap();

    tree.files[0].1 = b"ONE".to_vec();
    tree.files[2].1 = b"3".to_vec();
    tree.files.push(("a/new", b"new".to_vec(), false));
    let (report, bitmap) = offer(&dest, &tree);
    assert_eq!(
        (0..5).map(|n| needed(&bitmap, n)).collect::<Vec<_>>(),
        [true, false, true, false, true]
    );
    // `top` still holds "one", which `a/one` no longer does: copied from the old `top`.
    assert_eq!((report.sent_files, report.reused_files), (3, 2));
    assert_eq!(fs::read(dest.join("a/one")).unwrap(), b"ONE");
    assert_eq!(fs::read(dest.join("top")).unwrap(), b"one");
    assert_eq!(names(tmp.path()), ["tree"]);
}

#[test]
fn content_that_lies_about_its_sha256_is_refused_and_the_old_tree_stays() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("tree");
    let tree = sample();
    offer(&dest, &tree);
    let mut changed = sample();
    changed.files[0].1 = b"ONE".to_vec();
    let limits = UnpackLimits::default();
    let mut a = Assembly::prepare(&dest, &changed.listing(), &limits, None).unwrap();
    // Same size, other bytes than listed.
    let mut b = tar::Builder::new(Vec::new());
    append(&mut b, "a/one", b"eno");
    let err = a.receive(&b.into_inner().unwrap()[..]).unwrap_err();
    assert!(
        err.to_string().contains("does not match the sha256"),
        "{err}"
    );
    // The unchanged files were moved into staging; dropping the assembly moves them back.
    assert!(!dest.join("top").exists());
    fs::set_permissions(dest.join("a/b"), fs::Permissions::from_mode(0o700)).unwrap();
    drop(a);
    for (path, data, _) in &tree.files {
        assert_eq!(&fs::read(dest.join(path)).unwrap(), data, "{path}");
    }
    let mode = fs::metadata(dest.join("a/b/two")).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o755);
    assert_eq!(names(tmp.path()), ["tree"]);
}

#[test]
fn the_tar_stream_must_hold_exactly_the_needed_files_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("tree");
    let tree = sample();
    let limits = UnpackLimits::default();
    type Entries<'a> = Vec<(&'a str, &'a [u8])>;
    let cases: Vec<(Entries, &str)> = vec![
        (
            vec![("a/b/two", &[7u8; 300_000])],
            "not the next file asked for (a/one)",
        ),
        (vec![("a/one", b"one")], "ended before this needed file"),
        (vec![("a/one", b"on")], "2 bytes, listed as 3"),
    ];
    for (entries, want) in cases {
        let mut a = Assembly::prepare(&dest, &tree.listing(), &limits, None).unwrap();
        let mut b = tar::Builder::new(Vec::new());
        for (path, data) in entries {
            append(&mut b, path, data);
        }
        let err = a.receive(&b.into_inner().unwrap()[..]).unwrap_err();
        assert!(err.to_string().contains(want), "{want}: {err}");
    }
    // More than asked for, and a directory entry.
    offer(&dest, &tree);
    let mut a = Assembly::prepare(&dest, &tree.listing(), &limits, None).unwrap();
    let mut b = tar::Builder::new(Vec::new());
    append(&mut b, "a/one", b"one");
    let err = a.receive(&b.into_inner().unwrap()[..]).unwrap_err();
    assert!(err.to_string().contains("more files than"), "{err}");
    drop(a);
    let mut a = Assembly::prepare(&dest, &tree.listing(), &limits, None).unwrap();
    let mut b = tar::Builder::new(Vec::new());
    b.append_dir("x", tmp.path()).unwrap();
    let err = a.receive(&b.into_inner().unwrap()[..]).unwrap_err();
    assert!(err.to_string().contains("only the needed files"), "{err}");
    drop(a);
    assert_eq!(names(tmp.path()), ["tree"]);
}

#[test]
fn links_fifos_and_changed_files_in_the_old_tree_are_asked_for_never_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("tree");
    let tree = sample();
    offer(&dest, &tree);
    let secret = tmp.path().join("secret");
    fs::write(&secret, b"one").unwrap();
    // What an agent owning the tree could leave: a link to a file of the right content, a fifo,
    // and the same size with other bytes; a directory swapped for a link.
    fs::remove_file(dest.join("a/one")).unwrap();
    std::os::unix::fs::symlink(&secret, dest.join("a/one")).unwrap();
    fs::remove_file(dest.join("a/b/three")).unwrap();
    nix::unistd::mkfifo(
        &dest.join("a/b/three"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    fs::write(dest.join("a/b/two"), vec![8u8; 300_000]).unwrap();
    let (report, bitmap) = offer(&dest, &tree);
    assert_eq!(
        (0..4).map(|n| needed(&bitmap, n)).collect::<Vec<_>>(),
        [true, true, true, false]
    );
    assert_eq!(report.reused_files, 0);
    assert!(fs::symlink_metadata(dest.join("a/one")).unwrap().is_file());
    assert_eq!(fs::read(dest.join("a/b/two")).unwrap(), vec![7u8; 300_000]);

    fs::rename(dest.join("a"), tmp.path().join("moved")).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("moved"), dest.join("a")).unwrap();
    let (report, _) = offer(&dest, &tree);
    assert_eq!(report.reused_files, 0);
}

#[test]
fn listings_are_checked_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("tree");
    let sha = "0".repeat(64);
    let cases: Vec<(String, &str)> = vec![
        ("x a\n".into(), "starts with `d ` or `f `"),
        (format!("f {sha} 1 x\n"), "is `f <sha256>"),
        (format!("f {} 1 x a\n", "A".repeat(64)), "64 lowercase hex"),
        (format!("f {sha} big x a\n"), "not a number"),
        (format!("f {sha} 1 r a\n"), "neither x nor -"),
        (format!("f {sha} 1 x ../a\n"), "`..`"),
        (format!("f {sha} 1 x /a\n"), "absolute"),
        ("d a".into(), "does not end with a newline"),
        (
            format!("f {sha} 6 x a\nf {sha} 5 x b\n"),
            "more than 10 bytes",
        ),
        ("d a\nd b\nd c\n".into(), "more than 2 entries"),
    ];
    let limits = UnpackLimits {
        max_entries: 2,
        max_bytes: 10,
        private: false,
        part: None,
    };
    for (listing, want) in cases {
        let err = Assembly::prepare(&dest, listing.as_bytes(), &limits, None).unwrap_err();
        assert!(err.to_string().contains(want), "{listing:?}: {err}");
    }
    assert!(names(tmp.path()).is_empty());
}

#[test]
fn an_assembly_dropped_unfinished_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("tree");
    let a = Assembly::prepare(&dest, &sample().listing(), &UnpackLimits::default(), None).unwrap();
    assert_eq!(names(tmp.path()).len(), 1);
    drop(a);
    assert!(names(tmp.path()).is_empty());
}

#[test]
fn one_sha256_listed_with_two_sizes_is_asked_for_twice_and_refused_when_it_lies() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("tree");
    let data = b"hello world, sixteen+";
    let sha: [u8; 32] = Sha256::digest(data).into();
    let listed = |size| ListedFile {
        sha256: sha,
        size,
        exec: false,
    };
    let listing = file_line("a", &listed(21)) + &file_line("b", &listed(5));
    let limits = UnpackLimits::default();
    let mut a = Assembly::prepare(&dest, listing.as_bytes(), &limits, None).unwrap();
    assert_eq!(a.need(), (2, 26));
    let mut b = tar::Builder::new(Vec::new());
    append(&mut b, "a", data);
    append(&mut b, "b", &data[..5]);
    let err = a.receive(&b.into_inner().unwrap()[..]).unwrap_err();
    assert!(
        err.to_string().contains("\"b\"") && err.to_string().contains("sha256"),
        "{err}"
    );
    drop(a);
    assert!(names(tmp.path()).is_empty());
}

#[test]
fn a_path_listed_twice_is_refused_naming_its_second_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("tree");
    let sha = "0".repeat(64);
    let limits = UnpackLimits::default();
    for listing in [
        format!("f {sha} 1 - a\nd b\nf {sha} 1 - a\n"),
        "d d\nd d/\n".to_string(),
        "d d\nd ./d\n".to_string(),
    ] {
        let err = Assembly::prepare(&dest, listing.as_bytes(), &limits, None).unwrap_err();
        assert!(
            err.to_string().contains("listed twice"),
            "{listing:?}: {err}"
        );
    }
    let err = Assembly::prepare(
        &dest,
        format!("f {sha} 1 - a\nd b\nf {sha} 1 - a\n").as_bytes(),
        &limits,
        None,
    )
    .unwrap_err();
    assert!(err.to_string().starts_with("listing line 3:"), "{err}");
}

#[test]
fn content_another_tree_holds_is_copied_hashed_never_linked_and_a_changed_one_is_sent() {
    let root = tempfile::tempdir().unwrap();
    let first = root.path().join("first");
    let tree = sample();
    offer(&first, &tree);
    let kept = root.path().join("first.listing");
    fs::write(&kept, tree.listing()).unwrap();
    // The agent edits one file of the first tree in place (same size).
    fs::write(first.join("a/b/three"), b"THREE").unwrap();
    let second = Tree {
        dirs: vec!["x"],
        files: vec![
            ("x/two", vec![7u8; 300_000], false),
            ("x/three", b"three".to_vec(), false),
            ("x/new", b"new".to_vec(), false),
        ],
    };
    let dest = root.path().join("second");
    let others = [OtherTree {
        root: first.clone(),
        listing: kept,
    }];
    let limits = UnpackLimits::default();
    let mut a = Assembly::prepare_with(&dest, &second.listing(), &limits, None, &others).unwrap();
    let bitmap = a.need_bitmap().to_vec();
    assert_eq!(
        (0..3).map(|n| needed(&bitmap, n)).collect::<Vec<_>>(),
        [false, true, true],
        "two is the first tree's; three was changed there; new is nowhere"
    );
    a.receive(&second.tar_needed(&bitmap)[..]).unwrap();
    let report = a.finish().unwrap();
    assert_eq!((report.from_other_trees, report.sent_files), (1, 2));
    let copy = fs::metadata(dest.join("x/two")).unwrap();
    let source = fs::metadata(first.join("a/b/two")).unwrap();
    assert_ne!(copy.ino(), source.ino(), "a copy, never a link");
    assert_eq!((copy.nlink(), source.nlink()), (1, 1));
    // The listed mode of the new tree, not the source's (0755 there).
    assert_eq!(copy.permissions().mode() & 0o777, 0o644);
    assert_eq!(fs::read(dest.join("x/two")).unwrap(), vec![7u8; 300_000]);
    assert_eq!(fs::read(dest.join("x/three")).unwrap(), b"three");
    // The first tree is left as it was.
    assert_eq!(fs::read(first.join("a/b/two")).unwrap(), vec![7u8; 300_000]);
}

/// A POSIX access ACL (`system.posix_acl_access`, version 2) giving the uid `user` read and
/// write beside `mode`'s owner, group and others, as `setfacl -m u:<user>:rw` writes it.
fn acl_granting(user: u32, mode: u32) -> Vec<u8> {
    let undefined = u32::MAX;
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (0x01u16, (mode >> 6) & 7, undefined),
        (0x02, 6, user),
        (0x04, (mode >> 3) & 7, undefined),
        (0x10, 6 | ((mode >> 3) & 7), undefined),
        (0x20, mode & 7, undefined),
    ] {
        acl.extend(tag.to_le_bytes());
        acl.extend((perm as u16).to_le_bytes());
        acl.extend(id.to_le_bytes());
    }
    acl
}

/// The extended attributes of `path` its owner could have set (an LSM's `security.*` aside).
fn owner_xattrs(path: &Path) -> Vec<String> {
    let mut list = vec![0u8; 4096];
    let len = rustix::fs::llistxattr(path, &mut list[..]).unwrap();
    list[..len]
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty() && !n.starts_with(b"security."))
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect()
}

#[test]
fn a_reused_file_carries_no_extended_attribute_or_acl_and_a_tree_with_one_is_not_kept() {
    use rustix::fs::XattrFlags;
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("tree");
    let tree = sample();
    offer(&dest, &tree);
    let one = dest.join("a/one");
    let set = rustix::fs::setxattr(&one, "user.x", b"planted", XattrFlags::empty());
    if !pitcrew_test_support::prerequisite(
        set.is_ok(),
        &format!(
            "user extended attributes on the file system of {}: {set:?}",
            tmp.path().display()
        ),
    ) {
        return;
    }
    // Only an attribute was added: the tree is not kept but assembled, the file moved (the
    // same inode, nothing sent) without it.
    let before = fs::metadata(&one).unwrap().ino();
    let (report, _) = offer(&dest, &tree);
    assert_eq!((report.kept, report.sent_files), (false, 0), "{report:?}");
    assert!(report.moved_files >= 1, "{report:?}");
    assert_eq!(fs::metadata(&one).unwrap().ino(), before);
    assert_eq!(owner_xattrs(&one), Vec::<String>::new());
    assert!(offer(&dest, &tree).0.kept, "once stripped, kept again");

    // An access ACL on a file (which the owner may set) and a default ACL and an attribute on a
    // directory: gone too, the file's mode the listed one.
    let top = dest.join("top");
    let acl = acl_granting(12345, 0o644);
    let set = rustix::fs::setxattr(&top, "system.posix_acl_access", &acl, XattrFlags::empty());
    if !pitcrew_test_support::prerequisite(
        set.is_ok(),
        &format!("POSIX ACLs on {}: {set:?}", tmp.path().display()),
    ) {
        return;
    }
    let dir = dest.join("a/b");
    rustix::fs::setxattr(&dir, "system.posix_acl_default", &acl, XattrFlags::empty()).unwrap();
    rustix::fs::setxattr(&dir, "user.y", b"planted", XattrFlags::empty()).unwrap();
    let (report, _) = offer(&dest, &tree);
    assert_eq!((report.kept, report.sent_files), (false, 0), "{report:?}");
    for path in [&top, &dir, &one, &dest.join("a/b/two")] {
        assert_eq!(
            owner_xattrs(path),
            Vec::<String>::new(),
            "{}",
            path.display()
        );
    }
    assert_eq!(fs::metadata(&top).unwrap().mode() & 0o7777, 0o644);
    assert_eq!(fs::read(&top).unwrap(), b"one");
    assert!(offer(&dest, &tree).0.kept);
}
