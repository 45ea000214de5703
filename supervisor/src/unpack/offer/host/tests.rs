//! Unit tests of the host's side of an offered upload: the listing is the tree, in order, and
//! nothing but regular files and directories is ever opened or listed.

use super::*;
use crate::unpack::offer::parse;
use crate::unpack::offer::tests::make_fifo;
use crate::unpack::UnpackLimits;
use std::os::unix::fs::PermissionsExt;

/// The offer listing of the tree under `dir` and its files, from one walk.
fn list(dir: &Path) -> io::Result<(Vec<u8>, Offered)> {
    let (_, listing) = OfferListing::of_tree(dir, TreeFormat::PiTreeV1, None)?;
    assert_eq!(
        listing.sha256,
        <[u8; 32]>::from(Sha256::digest(&listing.bytes))
    );
    Ok((listing.bytes, listing.offered))
}

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
    let (out, offered) = list(dir.path()).unwrap();
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
    let (out, _) = list(dir.path()).unwrap();
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
fn links_and_special_files_are_refused_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    make(dir.path(), &[("a.txt", b"a", false)]);
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("z-link")).unwrap();
    let err = list(dir.path()).unwrap_err();
    assert!(err.to_string().contains("z-link is a symlink"), "{err}");
    fs::remove_file(dir.path().join("z-link")).unwrap();
    make_fifo(dir.path().join("z-fifo"));
    let err = list(dir.path()).unwrap_err();
    assert!(err.to_string().contains("z-fifo is a fifo"), "{err}");
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
fn a_listing_without_execute_bits_looks_them_up_and_gives_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    make(
        dir.path(),
        &[
            ("bin/run", b"#!/bin/sh\n", true),
            ("a.b", b"x", false),
            ("a/b", b"y", false),
        ],
    );
    let (digest, walked) = OfferListing::of_tree(dir.path(), TreeFormat::PiTreeV1, None).unwrap();
    let bare = TreeDigest {
        executables: None,
        ..digest.clone()
    };
    let looked_up = OfferListing::from_digest(dir.path(), &bare).unwrap();
    assert_eq!(looked_up.bytes, walked.bytes);
    // Upload order: `a` and what is in it before `a.b` (component order, not byte order).
    let text = String::from_utf8(walked.bytes.clone()).unwrap();
    let order: Vec<&str> = text
        .lines()
        .map(|l| l.rsplit(' ').next().unwrap())
        .collect();
    assert_eq!(order, ["a", "a/b", "a.b", "bin", "bin/run"]);
    assert!(text.contains(" x bin/run\n"), "{text}");
    assert_eq!(walked.named().lines, 5);
    // The manifest listing the supervisor derives from it is the walk's own.
    let derived =
        crate::unpack::offer::manifest_listing(&walked.bytes, &UnpackLimits::default()).unwrap();
    assert_eq!(derived, digest.listing);
    assert_eq!(derived.digest(TreeFormat::PiTreeV1), digest.sha256);
}

#[test]
fn the_listing_streamed_while_hashing_is_the_one_made_from_the_walk() {
    let dir = tempfile::tempdir().unwrap();
    let contents: Vec<(String, Vec<u8>, bool)> = (0..300)
        .map(|i| {
            // Some files far larger than others, so the threads finish out of order.
            let len = if i % 40 == 0 { 2_000_000 } else { i * 11 };
            (
                format!("d{}/s{}/f{i:04}", i % 5, i % 3),
                vec![(i % 251) as u8; len],
                i % 7 == 0,
            )
        })
        .collect();
    let files: Vec<(&str, &[u8], bool)> = contents
        .iter()
        .map(|(p, d, x)| (p.as_str(), d.as_slice(), *x))
        .collect();
    make(dir.path(), &files);
    make(dir.path(), &[("a.b", b"x", false), ("a/b", b"y", true)]);
    fs::create_dir(dir.path().join("empty")).unwrap();
    let (_, walked) = OfferListing::of_tree(dir.path(), TreeFormat::PiTreeV1, None).unwrap();
    let mut out = Vec::new();
    let streamed = list_tree_to(dir.path(), &mut out).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        String::from_utf8(walked.bytes.clone()).unwrap()
    );
    assert_eq!(streamed.sha256, walked.sha256);
    assert_eq!(streamed.named(), walked.named());
    assert_eq!(streamed.offered.files, walked.offered.files);
}

#[test]
fn a_streamed_listing_refuses_links_and_special_files_before_a_line_is_written() {
    let dir = tempfile::tempdir().unwrap();
    make(dir.path(), &[("a.txt", b"a", false)]);
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("z-link")).unwrap();
    let mut out = Vec::new();
    let err = list_tree_to(dir.path(), &mut out).unwrap_err();
    assert!(
        err.to_string().contains("z-link: cannot be uploaded"),
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
fn a_streamed_listing_stops_at_a_failing_writer_and_says_why() {
    struct Full(usize);
    impl Write for Full {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.0 == 0 {
                return Err(io::Error::other("the connection is gone"));
            }
            self.0 -= 1;
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let contents: Vec<(String, Vec<u8>)> = (0..200)
        .map(|i| (format!("f{i:03}"), vec![i as u8; 1000]))
        .collect();
    let files: Vec<(&str, &[u8], bool)> = contents
        .iter()
        .map(|(p, d)| (p.as_str(), d.as_slice(), false))
        .collect();
    make(dir.path(), &files);
    let err = list_tree_to(dir.path(), &mut Full(10)).unwrap_err();
    assert!(err.to_string().contains("the connection is gone"), "{err}");
}
