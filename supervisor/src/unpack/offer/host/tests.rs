//! Unit tests of the host's side of an offered upload: the listing is the tree, in order, and
//! nothing but regular files and directories is ever opened or listed.

use super::*;
use crate::unpack::offer::parse;
use crate::unpack::offer::tests::make_fifo;
use crate::unpack::UnpackLimits;
use std::os::unix::fs::PermissionsExt;

fn sha(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Writes `files` (`(path, content, exec)`) under `root`, creating their directories.
fn make(root: &Path, files: &[(&str, &[u8], bool)]) {
    for (path, data, exec) in files {
        let path = root.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, data).unwrap();
        let mode = if *exec { 0o755 } else { 0o644 };
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
    }
}

#[test]
fn the_listing_is_the_tree_in_upload_order() {
    let dir = tempfile::tempdir().unwrap();
    make(
        dir.path(),
        &[
            ("b/run.sh", b"#!/bin/sh\n", true),
            ("a.txt", b"hello", false),
            ("b/c/deep", b"", false),
        ],
    );
    fs::create_dir(dir.path().join("empty")).unwrap();
    let mut out = Vec::new();
    let offered = list_tree_to(dir.path(), &mut out).unwrap();
    let expected = format!(
        "f {} 5 - a.txt\nd b\nd b/c\nf {} 0 - b/c/deep\nf {} 10 x b/run.sh\nd empty\n",
        sha(b"hello"),
        sha(b""),
        sha(b"#!/bin/sh\n")
    );
    assert_eq!(String::from_utf8(out.clone()).unwrap(), expected);
    let files: Vec<_> = offered
        .files
        .iter()
        .map(|(rel, path, size)| (rel.as_str(), path.strip_prefix(dir.path()).unwrap(), *size))
        .collect();
    assert_eq!(
        files,
        [
            ("a.txt", Path::new("a.txt"), 5),
            ("b/c/deep", Path::new("b/c/deep"), 0),
            ("b/run.sh", Path::new("b/run.sh"), 10)
        ]
    );
    // What the supervisor parses.
    assert_eq!(parse(&out, &UnpackLimits::default()).unwrap().len(), 6);
}

#[test]
fn many_files_hashed_out_of_order_are_listed_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let contents: Vec<(String, Vec<u8>)> = (0..500)
        .map(|i| {
            // Some files far larger than others, so the threads finish out of order.
            let len = if i % 50 == 0 { 3_000_000 } else { i * 7 };
            (format!("d{}/f{i:04}", i % 7), vec![(i % 251) as u8; len])
        })
        .collect();
    let files: Vec<(&str, &[u8], bool)> = contents
        .iter()
        .map(|(p, d)| (p.as_str(), d.as_slice(), false))
        .collect();
    make(dir.path(), &files);
    let mut out = Vec::new();
    list_tree_to(dir.path(), &mut out).unwrap();
    let mut expected = String::new();
    for d in 0..7 {
        expected.push_str(&format!("d d{d}\n"));
        let mut mine: Vec<_> = contents
            .iter()
            .filter(|(p, _)| p.starts_with(&format!("d{d}/")))
            .collect();
        mine.sort();
        for (p, data) in mine {
            expected.push_str(&format!("f {} {} - {p}\n", sha(data), data.len()));
        }
    }
    assert_eq!(String::from_utf8(out).unwrap(), expected);
}

#[test]
fn links_and_special_files_are_refused_before_a_line_is_written() {
    let dir = tempfile::tempdir().unwrap();
    make(dir.path(), &[("a.txt", b"a", false)]);
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("z-link")).unwrap();
    let mut out = Vec::new();
    let err = list_tree_to(dir.path(), &mut out).unwrap_err();
    assert!(
        err.to_string().ends_with(
            "z-link: cannot be uploaded: not a regular file or directory (symlinks and special \
             files are never uploaded)"
        ),
        "{err}"
    );
    assert!(out.is_empty());
    fs::remove_file(dir.path().join("z-link")).unwrap();
    make_fifo(dir.path().join("z-fifo"));
    let err = list_tree_to(dir.path(), &mut out).unwrap_err();
    assert!(
        err.to_string().contains("z-fifo: cannot be uploaded"),
        "{err}"
    );
    assert!(out.is_empty());
}

#[test]
fn a_file_swapped_for_a_link_or_a_fifo_is_not_opened_through_it() {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link")).unwrap();
    let err = open_listed(&dir.path().join("link")).unwrap_err();
    assert!(err.to_string().contains("link: open"), "{err}");
    let fifo = dir.path().join("fifo");
    make_fifo(&fifo);
    // Opened without blocking (no writer will ever come), then refused.
    let err = open_listed(&fifo).unwrap_err();
    assert!(
        err.to_string().contains("fifo: cannot be uploaded"),
        "{err}"
    );
}

#[test]
fn a_file_gone_after_the_walk_stops_the_listing_after_what_came_before() {
    let dir = tempfile::tempdir().unwrap();
    make(
        dir.path(),
        &[("a", b"a", false), ("b", b"b", false), ("c", b"c", false)],
    );
    let entries = walk(dir.path()).unwrap();
    fs::remove_file(dir.path().join("b")).unwrap();
    let mut emitted = Vec::new();
    let err = hash_in_order(&[0, 1, 2], &entries, |k, file| {
        emitted.push((k, file.map(|f| f.size)));
        Ok(())
    })
    .unwrap_err();
    assert!(err.to_string().contains("/b: open"), "{err}");
    assert_eq!(emitted, [(0, Some(1))]);
}

#[test]
fn a_writer_that_fails_fails_the_listing_with_its_error() {
    struct Broken;
    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::new(io::ErrorKind::BrokenPipe, "gone"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<(String, Vec<u8>)> = (0..200).map(|i| (format!("f{i}"), vec![1; 100])).collect();
    let files: Vec<(&str, &[u8], bool)> = files
        .iter()
        .map(|(p, d)| (p.as_str(), d.as_slice(), false))
        .collect();
    make(dir.path(), &files);
    let err = list_tree_to(dir.path(), &mut Broken).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
}
