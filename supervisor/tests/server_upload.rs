//! `upload` through the real server: every refused entry kind leaves nothing behind (no
//! staging directory, nothing outside the destination); a good upload replaces the
//! destination with the right owner and modes.
#![allow(non_snake_case)] // attack tests are named attack_<class>__<case> (scripts/security-report)
#![allow(missing_docs)]

mod common;

use common::require_root_and_namespaces;
use common::server::{tar_of, Server};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use tar::EntryType as T;

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn attack_tar__every_refused_entry_kind_leaves_nothing_behind() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start_with(&["--upload-max-entries", "5", "--upload-max-bytes", "1000"]);
    let area = server.path("area");
    std::fs::create_dir(&area).unwrap();
    let dest = area.join("tree");
    let outside = server.path("escaped");
    let abs = format!("{}/abs", outside.display());
    let big = vec![b'x'; 1001];
    let many: Vec<(&[u8], T, &[u8])> = vec![
        (b"1", T::Regular, b""),
        (b"2", T::Regular, b""),
        (b"3", T::Regular, b""),
        (b"4", T::Regular, b""),
        (b"5", T::Regular, b""),
        (b"6", T::Regular, b""),
    ];
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "absolute",
            tar_of(&[(abs.as_bytes(), T::Regular, b"x")]),
            "absolute",
        ),
        (
            "dotdot",
            tar_of(&[(b"ok/../../../escaped", T::Regular, b"x")]),
            "`..`",
        ),
        ("symlink", tar_of(&[(b"l", T::Symlink, b"")]), "symlink"),
        ("hardlink", tar_of(&[(b"h", T::Link, b"")]), "hardlink"),
        (
            "char device",
            tar_of(&[(b"c", T::Char, b"")]),
            "character device",
        ),
        (
            "block device",
            tar_of(&[(b"b", T::Block, b"")]),
            "block device",
        ),
        ("fifo", tar_of(&[(b"f", T::Fifo, b"")]), "fifo"),
        ("newline", tar_of(&[(b"a\nb", T::Regular, b"x")]), "newline"),
        (
            "backslash",
            tar_of(&[(b"a\\b", T::Regular, b"x")]),
            "backslash",
        ),
        (
            "non-UTF-8",
            tar_of(&[(b"\xff\xfe", T::Regular, b"x")]),
            "UTF-8",
        ),
        ("too many entries", tar_of(&many), "more than 5 entries"),
        (
            "too many bytes",
            tar_of(&[(b"big", T::Regular, &big)]),
            "more than 1000 bytes",
        ),
    ];
    let mut c = server.connect();
    for (what, tar, rule) in cases {
        // A good entry first, so the staging directory exists when the refusal comes.
        let mut with_good = tar_of(&[(b"good/file", T::Regular, b"fine")]);
        with_good.truncate(with_good.len() - 1024); // drop the end-of-archive blocks
        with_good.extend_from_slice(&tar);
        let r = c.upload(&dest, None, &with_good);
        assert_eq!(r["type"], "error", "{what}: {r}");
        assert_eq!(r["kind"], "refused", "{what}: {r}");
        let message = r["message"].as_str().unwrap();
        assert!(message.contains(rule), "{what}: {message}");
        assert!(
            listing(&area).is_empty(),
            "{what}: left {:?}",
            listing(&area)
        );
        assert!(!outside.exists(), "{what}: wrote outside the destination");
    }
    // The connection is still usable and a good upload now works.
    let tar = tar_of(&[(b"good/file", T::Regular, b"fine")]);
    let r = c.upload(&dest, None, &tar);
    assert_eq!(r["type"], "ok", "{r}");
    assert_eq!(listing(&area), vec!["tree".to_string()]);
}

#[test]
fn a_good_upload_replaces_the_destination_with_owner_and_modes() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let dest = server.path("work/repo");
    std::fs::create_dir_all(&dest).unwrap();
    std::fs::write(dest.join("stale.txt"), b"old").unwrap();

    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(T::Directory);
    h.set_mode(0o777);
    h.set_size(0);
    b.append_data(&mut h, "src/", &[][..]).unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_mode(0o4777); // setuid and world-writable: only the owner-exec bit survives
    h.set_size(3);
    b.append_data(&mut h, "src/run.sh", &b"#!\n"[..]).unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_mode(0o600);
    h.set_size(5);
    let long = format!("{}/notes.md", "d".repeat(150));
    b.append_data(&mut h, &long, &b"hello"[..]).unwrap();
    let tar = b.into_inner().unwrap();

    let mut c = server.connect();
    let r = c.upload(&dest, Some((65534, 65534)), &tar);
    assert_eq!(r["type"], "ok", "{r}");
    assert_eq!(r["detail"]["files"], 2, "{r}");
    assert_eq!(r["detail"]["bytes"], 8, "{r}");
    assert!(
        !dest.join("stale.txt").exists(),
        "the old tree is replaced whole"
    );
    let script = std::fs::metadata(dest.join("src/run.sh")).unwrap();
    assert_eq!(script.mode() & 0o7777, 0o755);
    assert_eq!((script.uid(), script.gid()), (65534, 65534));
    let notes = std::fs::metadata(dest.join(&long)).unwrap();
    assert_eq!(notes.mode() & 0o7777, 0o644);
    assert_eq!(std::fs::read(dest.join(&long)).unwrap(), b"hello");
    let root = std::fs::metadata(&dest).unwrap();
    assert_eq!((root.uid(), root.mode() & 0o7777), (65534, 0o755));
    let src = std::fs::metadata(dest.join("src")).unwrap();
    assert_eq!((src.uid(), src.mode() & 0o7777), (65534, 0o755));
    assert_eq!(listing(dest.parent().unwrap()), vec!["repo".to_string()]);

    // Without an owner the tree is root's (what plugins and adapters need).
    let plugin = server.path("plugins/p");
    let r = c.upload(&plugin, None, &tar);
    assert_eq!(r["type"], "ok", "{r}");
    assert_eq!(
        std::fs::metadata(plugin.join("src/run.sh")).unwrap().uid(),
        0
    );
}
