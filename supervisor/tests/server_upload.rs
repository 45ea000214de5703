//! `upload` through the real server: every refused entry kind leaves nothing behind (no
//! staging directory, nothing outside the destination); a good upload replaces the
//! destination with the right owner and modes.
#![allow(non_snake_case)] // attack tests are named attack_<class>__<case> (scripts/security-report)
#![allow(missing_docs)]

mod common;

use common::require_root_and_namespaces;
use common::server::{tar_of, Server};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
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

/// A tree to offer, as `(path, content)` files below directories listed first.
struct Offer {
    dirs: Vec<&'static str>,
    files: Vec<(String, Vec<u8>)>,
}

impl Offer {
    fn listing(&self) -> Vec<u8> {
        use pitcrew_core::unpack::offer::{dir_line, file_line, ListedFile};
        use sha2::Digest;
        let mut out = String::new();
        for d in &self.dirs {
            out.push_str(&dir_line(d));
        }
        for (path, data) in &self.files {
            let file = ListedFile {
                sha256: sha2::Sha256::digest(data).into(),
                size: data.len() as u64,
                exec: false,
            };
            out.push_str(&file_line(path, &file));
        }
        out.into_bytes()
    }

    /// The tar stream of the needed files; `lie` replaces the content of the first one sent
    /// with other bytes of the same length.
    fn tar_needed(&self, bitmap: &[u8], lie: bool) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        let mut lied = !lie;
        for (n, (path, data)) in self.files.iter().enumerate() {
            if !pitcrew_core::unpack::offer::needed(bitmap, n) {
                continue;
            }
            let mut data = data.clone();
            if !lied {
                data.iter_mut().for_each(|b| *b = b.wrapping_add(1));
                lied = true;
            }
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            b.append_data(&mut h, path, &data[..]).unwrap();
        }
        b.into_inner().unwrap()
    }
}

fn sample_offer() -> Offer {
    Offer {
        dirs: vec!["src", "src/deep"],
        files: (0..20)
            .map(|n| {
                let dir = if n % 2 == 0 { "src" } else { "src/deep" };
                (
                    format!("{dir}/f{n}"),
                    format!("content {n}\n").repeat(n + 1).into_bytes(),
                )
            })
            .collect(),
    }
}

fn needed_count(bitmap_hex: &serde_json::Value, files: usize) -> usize {
    let bitmap = hex::decode(bitmap_hex.as_str().unwrap()).unwrap();
    (0..files)
        .filter(|&n| pitcrew_core::unpack::offer::needed(&bitmap, n))
        .count()
}

#[test]
fn an_offered_tree_sends_only_what_the_sandbox_lacks_and_a_lying_one_keeps_the_old_tree() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let dest = server.path("work/repo");
    let mut tree = sample_offer();
    let mut c = server.connect();

    let (need, done) = c.upload_offered(&dest, Some((65534, 65534)), &tree.listing(), |b| {
        tree.tar_needed(b, false)
    });
    assert_eq!(
        (need["type"].as_str(), need["files"].as_u64()),
        (Some("need"), Some(20)),
        "{need}"
    );
    assert_eq!(done["type"], "ok", "{done}");
    assert_eq!(done["detail"]["sent_files"], 20, "{done}");
    let f3 = std::fs::metadata(dest.join("src/deep/f3")).unwrap();
    assert_eq!((f3.uid(), f3.mode() & 0o7777), (65534, 0o644));

    // Unchanged: the listing and an empty tar stream.
    let (need, done) = c.upload_offered(&dest, Some((65534, 65534)), &tree.listing(), |b| {
        tree.tar_needed(b, false)
    });
    assert_eq!(needed_count(&need["need"], 20), 0, "{need}");
    assert_eq!(
        (
            done["detail"]["sent_files"].as_u64(),
            done["detail"]["reused_files"].as_u64()
        ),
        (Some(0), Some(20)),
        "{done}"
    );

    // Three files changed: three sent.
    for n in [2, 7, 19] {
        tree.files[n].1 = format!("changed {n}\n").into_bytes();
    }
    let (need, done) = c.upload_offered(&dest, Some((65534, 65534)), &tree.listing(), |b| {
        tree.tar_needed(b, false)
    });
    assert_eq!(needed_count(&need["need"], 20), 3, "{need}");
    assert_eq!(done["detail"]["sent_files"], 3, "{done}");
    assert_eq!(
        std::fs::read(dest.join("src/deep/f7")).unwrap(),
        b"changed 7\n"
    );

    // The host's bytes do not match the sha256 it listed: refused, the previous tree stays.
    tree.files[4].1 = b"other\n".to_vec();
    let (need, done) = c.upload_offered(&dest, Some((65534, 65534)), &tree.listing(), |b| {
        tree.tar_needed(b, true)
    });
    assert_eq!(needed_count(&need["need"], 20), 1, "{need}");
    assert_eq!(
        (done["type"].as_str(), done["kind"].as_str()),
        (Some("error"), Some("refused")),
        "{done}"
    );
    let message = done["message"].as_str().unwrap();
    assert!(
        message.contains("src/f4") && message.contains("sha256"),
        "{message}"
    );
    assert_eq!(
        std::fs::read(dest.join("src/f4")).unwrap(),
        b"content 4\n".repeat(5)
    );
    assert_eq!(listing(dest.parent().unwrap()), vec!["repo".to_string()]);

    // A listing that breaks a rule is refused before anything is written, naming its line.
    let (answer, done) = c.upload_offered(&dest, None, b"d ok\nf nothex 1 - x\n", |_| Vec::new());
    assert_eq!(answer["kind"], "refused", "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("listing line 2"),
        "{answer}"
    );
    assert!(done.is_null());
    assert_eq!(listing(dest.parent().unwrap()), vec!["repo".to_string()]);
    // So is a listing the host abandoned halfway (a file it was hashing vanished).
    let whole = tree.listing();
    let first = whole.split_inclusive(|&b| b == b'\n').next().unwrap();
    let abandoned = [first, pitcrew_core::unpack::offer::ABORT_LINE].concat();
    let (answer, done) = c.upload_offered(&dest, None, &abandoned, |_| Vec::new());
    assert_eq!(
        answer["message"], "listing line 3: the host abandoned the listing",
        "{answer}"
    );
    assert!(done.is_null());
    assert_eq!(listing(dest.parent().unwrap()), vec!["repo".to_string()]);
    // The connection is still usable.
    let (need, done) = c.upload_offered(&dest, Some((65534, 65534)), &tree.listing(), |b| {
        tree.tar_needed(b, false)
    });
    assert_eq!(needed_count(&need["need"], 20), 1, "{need}");
    assert_eq!(done["type"], "ok", "{done}");
}

/// Runs `script` with `sh -c` as the agent's uid (65534), failing the test if it fails.
fn as_agent(script: &str) {
    let out = std::process::Command::new("setpriv")
        .args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .output()
        .expect("setpriv (util-linux) runs");
    assert!(
        out.status.success(),
        "as uid 65534: {script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn attack_tar__an_offered_tree_never_takes_the_agents_links_fifos_or_edits_from_the_tree_it_replaces(
) {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let dest = server.path("work/repo");
    let tree = sample_offer();
    let mut c = server.connect();
    let agent = Some((65534, 65534));
    let (_, done) = c.upload_offered(&dest, agent, &tree.listing(), |b| tree.tar_needed(b, false));
    assert_eq!(done["type"], "ok", "{done}");
    // Root-only content the agent knows the bytes of (as a listed file's), and a place of its own.
    let secret = server.path("secret");
    std::fs::write(&secret, b"content 0\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let own = server.path("agent-own");
    std::fs::create_dir(&own).unwrap();
    std::os::unix::fs::chown(&own, Some(65534), Some(65534)).unwrap();
    let d = dest.display();
    let (s, o) = (secret.display(), own.display());
    // The agent, in the workspace it owns: a listed file becomes a symlink to the secret, another
    // a fifo, a third is edited in place (same size), a fourth gets a hard link of the agent's
    // own, and a whole directory becomes a link.
    as_agent(&format!(
        "set -e; cd {d}/src; rm f0; ln -s {s} f0; rm f2; mkfifo f2; \
         printf 'CONTENT 4\\nCONTENT 4\\nCONTENT 4\\nCONTENT 4\\nCONTENT 4\\n' > f4; \
         ln f6 {o}/keep-f6; mv deep {o}/deep; ln -s {o}/deep deep"
    ));
    let (need, done) =
        c.upload_offered(&dest, agent, &tree.listing(), |b| tree.tar_needed(b, false));
    assert_eq!(done["type"], "ok", "{done}");
    // f0, f2, f4 and the ten files of the linked directory are sent again; f6 and the other
    // plain files are copied.
    assert_eq!(needed_count(&need["need"], 20), 13, "{need}");
    for (path, data) in &tree.files {
        let p = dest.join(path);
        let meta = std::fs::symlink_metadata(&p).unwrap();
        assert!(meta.is_file(), "{path}: not a regular file");
        assert_eq!(meta.nlink(), 1, "{path}: has another name");
        assert_eq!(&std::fs::read(&p).unwrap(), data, "{path}");
    }
    assert!(std::fs::symlink_metadata(dest.join("src/deep"))
        .unwrap()
        .is_dir());
    // The agent's own link still names the old inode, not the new file.
    let kept = std::fs::metadata(own.join("keep-f6")).unwrap();
    let new = std::fs::metadata(dest.join("src/f6")).unwrap();
    assert_ne!(kept.ino(), new.ino());
    as_agent(&format!("printf changed > {o}/keep-f6"));
    assert_eq!(std::fs::read(dest.join("src/f6")).unwrap(), tree.files[6].1);
    // The secret was neither read into the tree nor changed.
    assert_eq!(std::fs::read(&secret).unwrap(), b"content 0\n");
}

#[test]
fn an_upload_cut_off_between_entries_is_abandoned_and_the_old_tree_stays() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let area = server.path("area");
    let dest = area.join("tree");
    let mut c = server.connect();
    let r = c.upload(&dest, None, &tar_of(&[(b"old", T::Regular, b"old")]));
    assert_eq!(r["type"], "ok", "{r}");
    // Whole entries, but neither the tar end blocks nor the empty frame: the stream is unpacked
    // as it arrives, and its end must come from the host, not from the connection going away.
    let mut cut = tar_of(&[(b"new", T::Regular, b"new"), (b"more", T::Regular, b"x")]);
    cut.truncate(cut.len() - 1024);
    for plain in [true, false] {
        let mut c = server.connect();
        if plain {
            c.send(serde_json::json!({"type": "upload", "dest": dest}));
        } else {
            c.send(serde_json::json!({"type": "upload", "dest": dest, "offer": true}));
            let listing = Offer {
                dirs: vec![],
                files: vec![
                    ("new".into(), b"new".to_vec()),
                    ("more".into(), b"x".to_vec()),
                ],
            }
            .listing();
            c.send_data(pitcrew_core::protocol::Channel::Listing, &listing);
            c.send_data(pitcrew_core::protocol::Channel::Listing, &[]);
            assert_eq!(c.recv_control()["type"], "need");
        }
        c.send_data(pitcrew_core::protocol::Channel::Tar, &cut);
        drop(c);
        let settled = common::busy_wait(
            || listing(&area) == ["tree"],
            std::time::Duration::from_secs(10),
        );
        assert!(settled, "plain {plain}: left {:?}", listing(&area));
        assert_eq!(listing(&dest), ["old"], "plain {plain}");
        // Nor is the listing the offered upload staged for later uploads kept.
        let held = server.records.join("held");
        let staged = common::busy_wait(
            || !listing(&held).iter().any(|f| f.ends_with(".pending")),
            std::time::Duration::from_secs(10),
        );
        assert!(staged, "plain {plain}: held {:?}", listing(&held));
    }
    // The server goes on serving.
    let r = c.upload(&dest, None, &tar_of(&[(b"new", T::Regular, b"new")]));
    assert_eq!(r["type"], "ok", "{r}");
}

#[test]
fn an_upload_sent_with_a_run_in_the_same_write_is_refused_never_assembled_under_the_agent() {
    if !require_root_and_namespaces() {
        return;
    }
    use pitcrew_core::protocol::{Channel, Frame, FrameKind};
    let server = Server::start();
    let sb = common::Sandbox::sh("sleep 0.5; exit 0");
    let mut c = server.connect();
    let r = c.request(serde_json::json!({"type": "set_manifest", "manifest": sb.manifest}));
    assert_eq!(r["type"], "ok", "{r}");
    let dest = sb.workdir.join("up");
    let tree = Offer {
        dirs: vec![],
        files: vec![("f".into(), b"hello".to_vec())],
    };
    // One write: both requests are taken from the same read, the run first.
    let mut bytes = Frame::control(&serde_json::json!({"type": "run", "id": 100})).encode();
    bytes.extend(
        Frame::control(
            &serde_json::json!({"type": "upload", "id": 101, "dest": dest, "offer": true}),
        )
        .encode(),
    );
    bytes.extend(Frame::data(Channel::Listing, tree.listing()).encode());
    bytes.extend(Frame::data(Channel::Listing, Vec::new()).encode());
    c.send_raw(&bytes);
    let mut upload = None;
    loop {
        let f = c.recv().expect("frame");
        if f.kind != FrameKind::Control {
            continue;
        }
        let v: serde_json::Value = serde_json::from_slice(&f.payload).unwrap();
        if v["id"] == 101 {
            upload = Some(v.clone());
        }
        if v["type"] == "result" {
            break;
        }
    }
    let upload = upload.expect("an answer to the upload");
    assert_eq!(
        (upload["type"].as_str(), upload["kind"].as_str()),
        (Some("error"), Some("busy")),
        "{upload}"
    );
    assert!(!dest.exists());
}

#[test]
fn a_zstd_compressed_upload_unpacks_and_a_corrupt_one_leaves_nothing() {
    if !require_root_and_namespaces() {
        return;
    }
    use pitcrew_core::protocol::Channel;
    use ruzstd::encoding::{compress_to_vec, CompressionLevel};
    let server = Server::start();
    let area = server.path("area");
    let dest = area.join("tree");
    let text = "let value = config.path;\n".repeat(4000);
    let tar = tar_of(&[
        (b"src/a.js", T::Regular, text.as_bytes()),
        (b"b.txt", T::Regular, b"b"),
    ]);
    let compressed = compress_to_vec(&tar[..], CompressionLevel::Fastest);
    assert!(
        compressed.len() * 10 < tar.len(),
        "the tar stream compresses"
    );
    let mut c = server.connect();
    let send = |c: &mut common::server::Client, compression: &str, bytes: &[u8]| {
        c.send(serde_json::json!({"type": "upload", "dest": dest, "compression": compression}));
        c.send_data(Channel::Tar, bytes);
        c.send_data(Channel::Tar, &[]);
        c.recv_control()
    };
    let r = send(&mut c, "zstd", &compressed);
    assert_eq!(r["type"], "ok", "{r}");
    assert_eq!(
        std::fs::read(dest.join("src/a.js")).unwrap(),
        text.as_bytes()
    );
    // Cut short, or not zstd at all: refused, the tree stays, no staging left.
    for (what, bytes) in [
        ("cut", &compressed[..compressed.len() / 2]),
        ("not zstd", &tar[..]),
    ] {
        let r = send(&mut c, "zstd", bytes);
        assert_eq!(r["kind"], "refused", "{what}: {r}");
        assert_eq!(listing(&area), ["tree"], "{what}");
        assert_eq!(std::fs::read(dest.join("b.txt")).unwrap(), b"b");
    }
    let r = send(&mut c, "gzip", &tar);
    assert_eq!(r["kind"], "refused", "{r}");
    assert!(r["message"].as_str().unwrap().contains("gzip"), "{r}");
}

#[test]
fn attack_tar__content_from_another_tree_is_copied_and_hashed_never_taken_through_the_agents_links()
{
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let work = server.path("work/repo");
    let tree = sample_offer();
    let mut c = server.connect();
    let (_, done) = c.upload_offered(&work, Some((65534, 65534)), &tree.listing(), |b| {
        tree.tar_needed(b, false)
    });
    assert_eq!(done["type"], "ok", "{done}");
    // The agent's uid owns the workspace: an edit of the same size, and a file turned into a
    // link to a root-only file of the listed content.
    std::fs::write(work.join("src/f0"), b"CONTENT 0\n").unwrap();
    let secret = server.path("secret");
    std::fs::write(&secret, &tree.files[2].1).unwrap();
    std::fs::remove_file(work.join("src/f2")).unwrap();
    std::os::unix::fs::symlink(&secret, work.join("src/f2")).unwrap();
    // The same content as a root-owned plugin elsewhere: all but those two come from the
    // workspace, copied (the plugin's own inodes, root's, 0644).
    let plugin = server.path("plugins/p");
    let (need, done) = c.upload_offered(&plugin, None, &tree.listing(), |b| {
        tree.tar_needed(b, false)
    });
    let bitmap = hex::decode(need["need"].as_str().unwrap()).unwrap();
    let sent: Vec<usize> = (0..20)
        .filter(|&n| pitcrew_core::unpack::offer::needed(&bitmap, n))
        .collect();
    assert_eq!(sent, [0, 2], "{need}");
    assert_eq!(done["detail"]["from_other_trees"], 18, "{done}");
    for (path, data) in &tree.files {
        assert_eq!(&std::fs::read(plugin.join(path)).unwrap(), data, "{path}");
        let copy = std::fs::symlink_metadata(plugin.join(path)).unwrap();
        assert!(copy.is_file(), "{path}");
        assert_eq!(
            (copy.uid(), copy.nlink(), copy.mode() & 0o7777),
            (0, 1, 0o644)
        );
        if let Ok(source) = std::fs::symlink_metadata(work.join(path)) {
            assert_ne!(copy.ino(), source.ino(), "{path}: a copy, never a link");
        }
    }
    // The workspace is left as the agent made it.
    assert!(std::fs::symlink_metadata(work.join("src/f2"))
        .unwrap()
        .file_type()
        .is_symlink());
}

/// A POSIX access or default ACL (version 2, as `setfacl -m u:<user>:rw` writes it) giving the
/// uid `user` read and write beside the owner's `rw-`, the group's and others' `r--`.
fn acl_granting(user: u32) -> Vec<u8> {
    let undefined = u32::MAX;
    let mut acl = 2u32.to_le_bytes().to_vec();
    // user::rw-, user:<user>:rw-, group::r--, mask::rw-, other::r--
    for (tag, perm, id) in [
        (0x01u16, 6u16, undefined),
        (0x02, 6, user),
        (0x04, 4, undefined),
        (0x10, 6, undefined),
        (0x20, 4, undefined),
    ] {
        acl.extend(tag.to_le_bytes());
        acl.extend(perm.to_le_bytes());
        acl.extend(id.to_le_bytes());
    }
    acl
}

/// Sets extended attributes `(path, name, value)` as the agent's uid (65534), as `setfattr` and
/// `setfacl` would (neither need be installed); `Err` is the first refusal's errno.
fn set_xattrs_as_agent(attrs: &[(&Path, &str, Vec<u8>)]) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt as _;
    use std::os::unix::process::CommandExt as _;
    let attrs: Vec<(CString, CString, Vec<u8>)> = attrs
        .iter()
        .map(|(path, name, value)| {
            (
                CString::new(path.as_os_str().as_bytes()).unwrap(),
                CString::new(*name).unwrap(),
                value.clone(),
            )
        })
        .collect();
    let mut cmd = std::process::Command::new("/bin/true");
    cmd.uid(65534).gid(65534);
    // SAFETY: the closure runs in the forked child before exec, after the uid and gid change,
    // and only makes setxattr system calls on memory prepared before the fork: it allocates
    // nothing and takes no lock.
    unsafe {
        cmd.pre_exec(move || {
            for (path, name, value) in &attrs {
                rustix::fs::setxattr(
                    path.as_c_str(),
                    name.as_c_str(),
                    value,
                    rustix::fs::XattrFlags::empty(),
                )?;
            }
            Ok(())
        });
    }
    let status = cmd.status()?;
    assert!(status.success(), "/bin/true as the agent: {status}");
    Ok(())
}

/// The extended attributes of `path` an owner can set (an LSM's `security.*` aside).
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
fn attack_tar__a_workspace_file_reused_by_an_offered_upload_keeps_none_of_the_agents_xattrs_or_acls(
) {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let dest = server.path("work/repo");
    let tree = sample_offer();
    let mut c = server.connect();
    let agent = Some((65534, 65534));
    let (_, done) = c.upload_offered(&dest, agent, &tree.listing(), |b| tree.tar_needed(b, false));
    assert_eq!(done["type"], "ok", "{done}");
    // The agent, owner of the workspace, marks files and a directory: an attribute of its own on
    // f8, one and an ACL granting another uid access on f6, a default ACL (what new files in it
    // inherit) and an attribute on src/deep.
    let (f6, f8, deep) = (
        dest.join("src/f6"),
        dest.join("src/f8"),
        dest.join("src/deep"),
    );
    let acl = acl_granting(12345);
    let planted = set_xattrs_as_agent(&[(&f8, "user.x", b"planted".to_vec())]);
    if !user_xattrs_supported(&planted, &dest) {
        return;
    }
    set_xattrs_as_agent(&[
        (&f6, "user.x", b"planted".to_vec()),
        (&f6, "system.posix_acl_access", acl.clone()),
        (&deep, "system.posix_acl_default", acl),
        (&deep, "user.y", b"planted".to_vec()),
    ])
    .unwrap();
    assert_eq!(owner_xattrs(&f6), ["user.x", "system.posix_acl_access"]);
    let f8_inode = std::fs::metadata(&f8).unwrap().ino();

    // The same tree offered again: nothing is sent, the files are reused (moved: f8 keeps its
    // inode), and none carries what the agent set.
    let (need, done) =
        c.upload_offered(&dest, agent, &tree.listing(), |b| tree.tar_needed(b, false));
    assert_eq!(needed_count(&need["need"], 20), 0, "{need}");
    assert_eq!(done["type"], "ok", "{done}");
    assert_ne!(done["detail"]["kept"], true, "{done}");
    assert!(done["detail"]["moved_files"].as_u64() > Some(0), "{done}");
    assert_eq!(std::fs::metadata(&f8).unwrap().ino(), f8_inode);
    for path in [dest.clone(), dest.join("src"), deep]
        .into_iter()
        .chain(tree.files.iter().map(|(p, _)| dest.join(p)))
    {
        assert_eq!(
            owner_xattrs(&path),
            Vec::<String>::new(),
            "{}",
            path.display()
        );
    }
    let meta = std::fs::metadata(&f6).unwrap();
    assert_eq!(
        (meta.uid(), meta.mode() & 0o7777),
        (65534, 0o644),
        "the listed owner and mode"
    );
    assert_eq!(std::fs::read(&f6).unwrap(), tree.files[6].1);
}

/// Whether the agent could set a `user.*` attribute in the workspace at all: a file system
/// without them (tmpfs before Linux 6.6) is a recorded skip.
fn user_xattrs_supported(planted: &std::io::Result<()>, dest: &Path) -> bool {
    pitcrew_test_support::prerequisite(
        planted.is_ok(),
        &format!(
            "user extended attributes on the file system of {}: {planted:?}",
            dest.display()
        ),
    )
}
