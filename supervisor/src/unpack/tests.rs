//! Unit tests of `unpack`.

use super::*;

fn header(path: &[u8], kind: tar::EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    {
        let name = &mut h.as_old_mut().name;
        name[..path.len()].copy_from_slice(path);
    }
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(0o644);
    h.set_cksum();
    h
}

fn tar_of(entries: &[(&[u8], tar::EntryType, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, kind, data) in entries {
        let h = header(path, *kind, data.len() as u64);
        b.append(&h, *data).unwrap();
    }
    b.into_inner().unwrap()
}

fn leftovers(parent: &Path) -> Vec<String> {
    fs::read_dir(parent)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn good_tree_replaces_destination() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("tree");
    fs::create_dir(&dest).unwrap();
    fs::write(dest.join("stale"), b"x").unwrap();
    let bytes = tar_of(&[
        (b"a/", tar::EntryType::Directory, b""),
        (b"a/b.txt", tar::EntryType::Regular, b"hello"),
        (b"./c/d.txt", tar::EntryType::Regular, b"!"),
    ]);
    let report = unpack_tar(&bytes[..], &dest, &UnpackLimits::default(), None).unwrap();
    assert_eq!(report.files, 2);
    assert_eq!(report.bytes, 6);
    assert_eq!(fs::read(dest.join("a/b.txt")).unwrap(), b"hello");
    assert!(!dest.join("stale").exists());
    assert_eq!(leftovers(tmp.path()), vec!["tree".to_string()]);
}

#[test]
fn refused_entries_leave_nothing() {
    let cases: Vec<(&[u8], tar::EntryType, &str)> = vec![
        (b"/etc/x", tar::EntryType::Regular, "absolute"),
        (b"a/../../x", tar::EntryType::Regular, "`..`"),
        (b"l", tar::EntryType::Symlink, "symlink"),
        (b"h", tar::EntryType::Link, "hardlink"),
        (b"c", tar::EntryType::Char, "character device"),
        (b"b", tar::EntryType::Block, "block device"),
        (b"f", tar::EntryType::Fifo, "fifo"),
        (b"n\nx", tar::EntryType::Regular, "newline"),
        (b"n\\x", tar::EntryType::Regular, "backslash"),
        (b"\xff", tar::EntryType::Regular, "UTF-8"),
    ];
    for (path, kind, rule) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("tree");
        let bytes = tar_of(&[(b"ok", tar::EntryType::Regular, b"1"), (path, kind, b"")]);
        let err = unpack_tar(&bytes[..], &dest, &UnpackLimits::default(), None).unwrap_err();
        assert!(err.to_string().contains(rule), "{rule}: {err}");
        assert!(leftovers(tmp.path()).is_empty(), "{rule}");
    }
}

#[test]
fn limits_are_enforced() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("tree");
    let bytes = tar_of(&[
        (b"a", tar::EntryType::Regular, b"1"),
        (b"b", tar::EntryType::Regular, b"2"),
    ]);
    let limits = UnpackLimits {
        max_entries: 1,
        max_bytes: 100,
        private: false,
        part: None,
    };
    let err = unpack_tar(&bytes[..], &dest, &limits, None).unwrap_err();
    assert!(err.to_string().contains("more than 1 entries"), "{err}");
    let limits = UnpackLimits {
        max_entries: 10,
        max_bytes: 1,
        private: false,
        part: None,
    };
    let err = unpack_tar(&bytes[..], &dest, &limits, None).unwrap_err();
    assert!(err.to_string().contains("bytes"), "{err}");
    assert!(leftovers(tmp.path()).is_empty());
}

#[test]
fn a_part_limit_bounds_the_files_below_its_directories_together() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("record");
    let limits = UnpackLimits {
        part: Some(PartLimit {
            dirs: &["output", "workspace"],
            max_bytes: 8,
            entry_cost: false,
        }),
        ..UnpackLimits::default()
    };
    // Files at the top, or below a directory not named (`outputs/`), do not count.
    let mut entries: Vec<(&[u8], tar::EntryType, &[u8])> = vec![
        (b"output/a", tar::EntryType::Regular, b"1234"),
        (b"output.jsonl", tar::EntryType::Regular, b"12345678"),
        (b"outputs/x", tar::EntryType::Regular, b"12345678"),
        (b"workspace/sub/b", tar::EntryType::Regular, b"1234"),
    ];
    let report = unpack_tar(&tar_of(&entries)[..], &dest, &limits, None).unwrap();
    assert_eq!(report.bytes, 24);
    // One byte more below them is refused, naming the entry and the limit.
    entries.push((b"workspace/c", tar::EntryType::Regular, b"1"));
    let err = unpack_tar(&tar_of(&entries)[..], &dest, &limits, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tar entry \"workspace/c\" refused: more than 8 bytes of file content below output/, \
         workspace/"
    );
    // The earlier unpack stays as it was.
    assert_eq!(fs::read(dest.join("workspace/sub/b")).unwrap(), b"1234");
    assert_eq!(leftovers(tmp.path()), ["record"]);
    // A GNU sparse file (1 GiB of holes in a few header bytes) is refused: an archive carries
    // no holes, and every file is counted at the size it writes.
    let mut h = header(b"output/s", tar::EntryType::GNUSparse, 1);
    let gnu = h.as_gnu_mut().unwrap();
    gnu.set_real_size(1 << 30);
    gnu.sparse[0].set_offset((1 << 30) - 1);
    gnu.sparse[0].set_length(1);
    h.set_cksum();
    let mut b = tar::Builder::new(Vec::new());
    b.append(&h, &b"x"[..]).unwrap();
    let bytes = b.into_inner().unwrap();
    let err = unpack_tar(&bytes[..], &dest, &limits, None).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("refused: entry type 'S' is refused"),
        "{err}"
    );
}

#[test]
fn an_entry_cost_limit_counts_files_in_blocks_and_every_directory() {
    assert_eq!(
        [0, 1, 4096, 4097, u64::MAX].map(file_cost),
        [INODE_BYTES, 4096, 4096, 8192, u64::MAX]
    );
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("record");
    let limits = |max_bytes| UnpackLimits {
        part: Some(PartLimit {
            dirs: &["output", "workspace"],
            max_bytes,
            entry_cost: true,
        }),
        ..UnpackLimits::default()
    };
    // `output/` listed and `workspace/sub/` created on the way count, `outputs/` does not:
    // 3 directories, a 1-byte file (a block) and an empty one (an inode).
    let entries: Vec<(&[u8], tar::EntryType, &[u8])> = vec![
        (b"output/", tar::EntryType::Directory, b""),
        (b"output/a", tar::EntryType::Regular, b"1"),
        (b"outputs/x/y", tar::EntryType::Regular, b"12345678"),
        (b"workspace/sub/e", tar::EntryType::Regular, b""),
    ];
    let cost = 3 * DIR_COST + BLOCK_BYTES + INODE_BYTES;
    let report = unpack_tar(&tar_of(&entries)[..], &dest, &limits(cost), None).unwrap();
    assert_eq!((report.dirs, report.bytes), (5, 9));
    // A byte less refuses the last entry, and the earlier unpack stays.
    let err = unpack_tar(&tar_of(&entries)[..], &dest, &limits(cost - 1), None).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "tar entry \"workspace/sub/e\" refused: more than {} bytes of files and directories \
             (each counted in whole 4096-byte blocks) below output/, workspace/",
            cost - 1
        )
    );
    assert!(dest.join("workspace/sub/e").exists());
    assert_eq!(leftovers(tmp.path()), ["record"]);
    // An empty directory costs its block too.
    let dirs: Vec<(&[u8], tar::EntryType, &[u8])> = vec![
        (b"workspace/", tar::EntryType::Directory, b""),
        (b"workspace/d/", tar::EntryType::Directory, b""),
    ];
    let err = unpack_tar(&tar_of(&dirs)[..], &dest, &limits(DIR_COST), None).unwrap_err();
    assert!(err
        .to_string()
        .starts_with("tar entry \"workspace/d/\" refused: more than 4096"));
}

#[test]
fn paths_are_checked() {
    assert_eq!(check_entry_path(b"./a/./b").unwrap(), vec!["a", "b"]);
    assert!(check_entry_path(&vec![b'a'; MAX_PATH_LEN + 1]).is_err());
}

/// A tar of `entries` (path, data) with GNU long names, as `tar_dir` writes them.
fn long_tar(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(if path.ends_with('/') {
            tar::EntryType::Directory
        } else {
            tar::EntryType::Regular
        });
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, path, *data).unwrap();
    }
    b.into_inner().unwrap()
}

#[test]
fn entries_near_the_path_limit_unpack_below_a_long_destination() {
    // The destination's own path (~3000 bytes) plus an entry path of ~4000 bytes is far over
    // PATH_MAX: every entry is created relative to its directory's descriptor.
    let tmp = tempfile::tempdir().unwrap();
    let mut base = tmp.path().to_path_buf();
    for i in 0..11 {
        base.push(format!("{i:x}{}", "h".repeat(254)));
    }
    fs::create_dir_all(&base).unwrap();
    let dest = base.join("iteration-1");
    assert!(dest.as_os_str().len() > 2800);
    let name = "n".repeat(255);
    let dir: String = (0..15).map(|_| format!("{name}/")).collect();
    let file = format!("output/{dir}{}", "f".repeat(100));
    assert!(
        file.len() > 3900 && file.len() <= MAX_PATH_LEN,
        "{}",
        file.len()
    );
    let bytes = long_tar(&[
        ("result.json", b"{}"),
        (&file, b"deep"),
        (&format!("output/{dir}"), b""),
    ]);
    let report = unpack_tar(&bytes[..], &dest, &UnpackLimits::default(), None).unwrap();
    assert_eq!((report.files, report.dirs), (2, 16));
    // Read back one component at a time as well.
    let mut fd = crate::bounded_tree::open_dir(&dest.join("output")).unwrap();
    for _ in 0..15 {
        fd = crate::bounded_tree::open_dir_at(fd.as_fd(), name.as_ref()).unwrap();
    }
    let f = rustix::fs::openat(&fd, "f".repeat(100).as_str(), OFlags::RDONLY, Mode::empty());
    let mut text = String::new();
    File::from(f.unwrap()).read_to_string(&mut text).unwrap();
    assert_eq!(text, "deep");
    // Replacing it removes the old deep tree, and nothing else is left beside it.
    unpack_tar(
        &tar_of(&[(b"x", tar::EntryType::Regular, b"1")])[..],
        &dest,
        &UnpackLimits::default(),
        None,
    )
    .unwrap();
    assert_eq!(leftovers(&base), vec!["iteration-1".to_string()]);
    assert!(dest.join("x").is_file());
    crate::bounded_tree::remove_path(&dest).unwrap();
}

#[cfg(target_os = "linux")]
#[test]
fn a_2000_deep_entry_unpacks_with_64_descriptors() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("tree");
    let deep = "a/".repeat(2000);
    let bytes = long_tar(&[
        (&format!("{deep}f"), b"1"),
        (&format!("{deep}g"), b"2"),
        ("b/c", b"3"),
    ]);
    crate::bounded_tree::test_support::with_fd_limit(64, || {
        // Twice: the second replaces the 2000-deep tree, which goes as well.
        for _ in 0..2 {
            let report = unpack_tar(&bytes[..], &dest, &UnpackLimits::default(), None)
                .map_err(|e| e.to_string())?;
            if (report.files, report.dirs) != (3, 2001) {
                return Err(format!("{report:?}"));
            }
        }
        Ok(())
    });
    assert_eq!(fs::read(dest.join("b/c")).unwrap(), b"3");
    assert_eq!(leftovers(tmp.path()), vec!["tree".to_string()]);
    crate::bounded_tree::remove_path(&dest).unwrap();
}
