//! Offered uploads that name their listing by digest (`upload.listing_digest`) through the real
//! server: a listing the supervisor holds is not sent again, another one goes as a delta against
//! it (the whole listing when the delta does not rebuild it), a held file changed behind the
//! supervisor's back is not believed, and a manifest tree names the held listing instead of
//! carrying its files, refused unless the supervisor holds exactly that one.

#![allow(non_snake_case)] // attack tests are named attack_<class>__<case> (scripts/security-report)
#![allow(missing_docs)]

mod common;

use common::server::{Client, Server};
use common::{require_root_and_namespaces, Sandbox};
use pitcrew_core::protocol::{Channel, FrameKind};
use pitcrew_core::tree_hash::{hash_tree, TreeDigest, TreeFormat};
use pitcrew_core::unpack::offer::{delta, dir_line, file_line, needed, ListedFile};
use serde_json::{json, Value};
use sha2::Digest as _;
use std::fs;
use std::path::{Path, PathBuf};

/// A source tree of `files` files in a few directories, on the host's side.
fn source(root: &Path, files: usize) -> TreeDigest {
    for i in 0..files {
        let dir = root.join(format!("d{}", i % 7));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(format!("f{i:04}.js")), format!("file {i}\n")).unwrap();
    }
    hash_tree(root, TreeFormat::PiTreeV1).unwrap()
}

/// The offered listing of a digest's tree: its directories, then its files in listing order.
fn offer_listing(digest: &TreeDigest) -> Vec<u8> {
    let mut out = String::new();
    for d in &digest.listing.dirs {
        out.push_str(&dir_line(d));
    }
    for f in &digest.listing.files {
        let mut sha256 = [0u8; 32];
        hex::decode_to_slice(&f.sha256, &mut sha256).unwrap();
        let file = ListedFile {
            sha256,
            size: f.size,
            exec: false,
        };
        out.push_str(&file_line(&f.path, &file));
    }
    out.into_bytes()
}

fn named(listing: &[u8]) -> Value {
    json!({
        "sha256": hex::encode(sha2::Sha256::digest(listing)),
        "bytes": listing.len(),
        "lines": listing.iter().filter(|&&b| b == b'\n').count(),
    })
}

/// A delta of `listing` against the chunks named `held`: written here from the wire spec, not
/// with the host's own function.
fn delta_of(listing: &[u8], held: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for range in delta::chunks(listing) {
        let chunk = &listing[range];
        match held.iter().position(|d| *d == delta::chunk_digest(chunk)) {
            Some(i) => out.extend_from_slice(format!("= {i} {}\n", i + 1).as_bytes()),
            None => out.extend_from_slice(chunk),
        }
    }
    out
}

/// The tar stream of the files of `digest`'s tree under `root` that `bitmap` asks for.
fn tar_needed(root: &Path, digest: &TreeDigest, bitmap: &[u8]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (n, f) in digest.listing.files.iter().enumerate() {
        if needed(bitmap, n) {
            let data = fs::read(root.join(&f.path)).unwrap();
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            b.append_data(&mut h, &f.path, &data[..]).unwrap();
        }
    }
    b.into_inner().unwrap()
}

/// What one upload by digest went through.
struct Uploaded {
    /// Each `send_listing`'s chunks and reason.
    asked: Vec<(Vec<String>, String)>,
    /// The `need` (or the error that ended the upload).
    need: Value,
    /// The final answer (`Null` when the upload ended at `need`'s place).
    done: Value,
    /// Listing bytes sent on channel 4.
    listing_bytes: usize,
}

/// `upload` with `offer` and the listing named by digest: answers each `send_listing` with
/// `answer(chunks, times asked)`, then sends the tar stream `need` asks for.
fn upload_named(
    c: &mut Client,
    dest: &Path,
    root: &Path,
    digest: &TreeDigest,
    mut answer: impl FnMut(&[String], usize) -> Vec<u8>,
) -> Uploaded {
    let listing = offer_listing(digest);
    c.send(json!({"type": "upload", "dest": dest, "offer": true, "listing": named(&listing)}));
    let mut out = Uploaded {
        asked: Vec::new(),
        need: Value::Null,
        done: Value::Null,
        listing_bytes: 0,
    };
    loop {
        let v = c.recv_control();
        match v["type"].as_str() {
            Some("send_listing") => {
                let chunks: Vec<String> = serde_json::from_value(v["chunks"].clone()).unwrap();
                let reason = v["reason"].as_str().unwrap().to_string();
                let bytes = answer(&chunks, out.asked.len());
                out.asked.push((chunks, reason));
                out.listing_bytes += bytes.len();
                for chunk in bytes.chunks(100_000) {
                    c.send_data(Channel::Listing, chunk);
                }
                c.send_data(Channel::Listing, &[]);
            }
            Some("need") => {
                out.need = v;
                break;
            }
            _ => {
                out.need = v;
                return out;
            }
        }
    }
    let bitmap = hex::decode(out.need["need"].as_str().unwrap()).unwrap();
    let tar = tar_needed(root, digest, &bitmap);
    for chunk in tar.chunks(100_000) {
        c.send_data(Channel::Tar, chunk);
    }
    c.send_data(Channel::Tar, &[]);
    out.done = c.recv_control();
    out
}

fn whole(listing: Vec<u8>) -> impl FnMut(&[String], usize) -> Vec<u8> {
    move |_, _| listing.clone()
}

fn held_files(server: &Server) -> Vec<PathBuf> {
    fs::read_dir(server.records.join("held"))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

#[test]
fn a_held_listing_is_named_not_sent_and_a_changed_one_goes_as_a_delta() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let src = server.path("src");
    let dest = server.path("work/repo");
    let digest = source(&src, 2000);
    let mut c = server.connect();

    // Nothing held: asked for whole, with the reason.
    let up = upload_named(&mut c, &dest, &src, &digest, whole(offer_listing(&digest)));
    assert_eq!(up.asked.len(), 1);
    assert!(up.asked[0].0.is_empty());
    assert!(
        up.asked[0].1.contains("holds no listing"),
        "{}",
        up.asked[0].1
    );
    assert_eq!(up.done["detail"]["sent_files"], 2000, "{}", up.done);

    // The same tree again: not asked for, the need bitmap all zero in its compact form.
    let up = upload_named(&mut c, &dest, &src, &digest, |_, _| panic!("not asked"));
    assert!(up.asked.is_empty());
    assert_eq!(
        (up.need["need"].as_str(), up.need["files"].as_u64()),
        (Some(""), Some(0)),
        "{}",
        up.need
    );
    assert_eq!(up.done["detail"]["kept"], true, "{}", up.done);

    // Three files changed: the listing goes as a delta, three files are sent.
    for i in [3, 300, 1999] {
        fs::write(
            src.join(format!("d{}/f{i:04}.js", i % 7)),
            format!("changed {i}\n"),
        )
        .unwrap();
    }
    let changed = hash_tree(&src, TreeFormat::PiTreeV1).unwrap();
    let listing = offer_listing(&changed);
    let up = upload_named(&mut c, &dest, &src, &changed, |held, _| {
        delta_of(&listing, held)
    });
    assert_eq!(up.asked.len(), 1);
    assert!(!up.asked[0].0.is_empty());
    assert!(up.asked[0].1.contains("another one"), "{}", up.asked[0].1);
    assert!(
        up.listing_bytes < listing.len() / 5,
        "{} of {} bytes",
        up.listing_bytes,
        listing.len()
    );
    assert_eq!(up.need["files"], 3, "{}", up.need);
    assert_eq!(up.done["detail"]["sent_files"], 3, "{}", up.done);
    assert_eq!(
        fs::read(dest.join("d6/f0300.js")).unwrap(),
        b"changed 300\n"
    );
}

#[test]
fn the_claim_names_the_held_listings_and_one_sent_unnamed_is_held_too() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let src = server.path("src");
    let dest = server.path("work/repo");
    let digest = source(&src, 300);
    let listing = offer_listing(&digest);
    let claim = |c: &mut common::server::Client| {
        c.request(json!({"type": "claim", "run": "r1"}))["detail"]["held_listings"].clone()
    };

    // A sandbox holding nothing says so: the host sends its listing unnamed, as it makes it.
    let mut c = server.connect();
    assert_eq!(claim(&mut c), json!({}));
    let (need, done) = c.upload_offered(&dest, None, &listing, |bitmap| {
        tar_needed(&src, &digest, bitmap)
    });
    assert_eq!(need["files"], 300, "{need}");
    assert_eq!(done["detail"]["sent_files"], 300, "{done}");
    assert_eq!(c.request(json!({"type": "release"}))["type"], "ok");
    drop(c);

    // The next run's claim names it with the SHA-256 of the listing sent, and an upload naming
    // that listing is spared sending it.
    let mut c = server.connect();
    let sha256 = hex::encode(sha2::Sha256::digest(&listing));
    assert_eq!(
        claim(&mut c),
        json!({ dest.to_str().unwrap(): sha256.clone() })
    );
    let up = upload_named(&mut c, &dest, &src, &digest, |_, _| panic!("not asked"));
    assert!(up.asked.is_empty());
    assert_eq!(up.done["detail"]["kept"], true, "{}", up.done);

    // A plain upload over the destination drops its listing: the claim no longer names it.
    let tar = tar_needed(&src, &digest, &[0xff; 64]);
    assert_eq!(c.upload(&dest, None, &tar)["type"], "ok");
    assert_eq!(c.request(json!({"type": "release"}))["type"], "ok");
    drop(c);
    let mut c = server.connect();
    assert_eq!(claim(&mut c), json!({}));
}

#[test]
fn a_delta_that_does_not_rebuild_the_named_listing_is_followed_by_the_whole_one() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let src = server.path("src");
    let dest = server.path("work/repo");
    let digest = source(&src, 200);
    let mut c = server.connect();
    let up = upload_named(&mut c, &dest, &src, &digest, whole(offer_listing(&digest)));
    assert_eq!(up.done["type"], "ok", "{}", up.done);
    fs::write(src.join("d0/f0000.js"), "changed\n").unwrap();
    let changed = hash_tree(&src, TreeFormat::PiTreeV1).unwrap();
    let listing = offer_listing(&changed);
    // First a delta naming the wrong chunk, then the whole listing.
    let up = upload_named(&mut c, &dest, &src, &changed, |held, asked| match asked {
        0 => format!("= 1 {}\n", held.len()).into_bytes(),
        _ => listing.clone(),
    });
    assert_eq!(up.asked.len(), 2, "{:?}", up.need);
    assert!(up.asked[1].0.is_empty());
    assert!(
        up.asked[1].1.contains("is not the one the upload named"),
        "{}",
        up.asked[1].1
    );
    assert_eq!(up.done["detail"]["sent_files"], 1, "{}", up.done);

    // Asked for whole and still not the listing named: refused, the tree left as it was.
    fs::write(src.join("d0/f0000.js"), "again\n").unwrap();
    let again = hash_tree(&src, TreeFormat::PiTreeV1).unwrap();
    let up = upload_named(&mut c, &dest, &src, &again, |_, _| listing.clone());
    assert_eq!(up.need["kind"], "refused", "{}", up.need);
    assert_eq!(fs::read(dest.join("d0/f0000.js")).unwrap(), b"changed\n");
    // The connection takes the next request.
    let r = c.request(json!({"type": "status"}));
    assert_eq!(r["type"], "status", "{r}");
}

#[test]
fn attack_held__a_listing_file_changed_behind_the_supervisor_is_not_believed() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let sb = Sandbox::sh("exit 0");
    let src = server.path("src");
    let dest = server.path("plugins/big");
    let digest = source(&src, 50);
    let mut c = server.connect();
    let up = upload_named(&mut c, &dest, &src, &digest, whole(offer_listing(&digest)));
    assert_eq!(up.done["type"], "ok", "{}", up.done);
    // Whoever could write the held file makes it list a file the tree does not hold.
    let held = held_files(&server);
    assert_eq!(held.len(), 1, "{held:?}");
    let mut bytes = fs::read(&held[0]).unwrap();
    bytes.extend_from_slice(b"d planted\n");
    fs::write(&held[0], &bytes).unwrap();

    // The upload is not spared: the listing is asked for, naming why.
    let up = upload_named(&mut c, &dest, &src, &digest, whole(offer_listing(&digest)));
    assert_eq!(up.asked.len(), 1);
    assert!(
        up.asked[0].1.contains("is not what was written"),
        "{}",
        up.asked[0].1
    );
    assert_eq!(up.done["detail"]["kept"], true, "{}", up.done);
    assert!(!dest.join("planted").exists());

    // The manifest's listing by digest: refused once the held file changed, and for a digest
    // the supervisor does not hold.
    let pin = json!({
        "name": "big", "path": dest, "role": "plugin", "kind": "data", "format": "pi-tree-v1",
        "sha256": digest.sha256,
    });
    let mut manifest = sb.manifest.clone();
    manifest["trees"] = json!([pin]);
    let r =
        c.request(json!({"type": "set_manifest", "manifest": manifest, "listings_follow": true}));
    assert_eq!(r["type"], "ok", "{r}");
    let d = hex::encode(sha2::Sha256::digest(offer_listing(&digest)));
    fs::write(&held_files(&server)[0], b"d planted\n").unwrap();
    let r =
        c.request(json!({"type": "add_listing", "tree": "big", "held_listing": d, "last": true}));
    assert_eq!(r["kind"], "refused", "{r}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("is not what was written"),
        "{r}"
    );
    let r = c.request(json!({
        "type": "add_listing", "tree": "big", "held_listing": "00".repeat(32), "last": true,
    }));
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains(&format!("not {}", "00".repeat(32))),
        "{r}"
    );
    // Still awaited: the host sends it in parts.
    let r = c.request(json!({"type": "run"}));
    assert_eq!(r["kind"], "order", "{r}");
}

/// Runs one iteration and returns its record.
fn run(c: &mut Client) -> Value {
    c.send(json!({"type": "run"}));
    loop {
        let frame = c.recv().expect("frame before the result");
        if frame.kind == FrameKind::Control {
            let v: Value = serde_json::from_slice(&frame.payload).unwrap();
            match v["type"].as_str() {
                Some("result") => return v["record"].clone(),
                Some("event") => continue,
                _ => panic!("unexpected message during run: {v}"),
            }
        }
    }
}

#[test]
fn a_manifest_tree_names_the_held_listing_and_a_drift_is_explained_against_it() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let sb = Sandbox::sh("exit 0");
    let src = server.path("src");
    let dest = server.path("plugins/big");
    let other = server.path("plugins/other");
    let digest = source(&src, 80);
    let mut c = server.connect();
    let listing = offer_listing(&digest);
    let up = upload_named(&mut c, &dest, &src, &digest, whole(listing.clone()));
    assert_eq!(up.done["type"], "ok", "{}", up.done);
    let pin = |name: &str, path: &Path, sha256: &str| {
        json!({
            "name": name, "path": path, "role": "plugin", "kind": "data",
            "format": "pi-tree-v1", "sha256": sha256,
        })
    };
    let mut manifest = sb.manifest.clone();
    manifest["trees"] = json!([
        pin("big", &dest, &digest.sha256),
        pin("other", &other, &digest.sha256)
    ]);
    let r =
        c.request(json!({"type": "set_manifest", "manifest": manifest, "listings_follow": true}));
    assert_eq!(r["type"], "ok", "{r}");
    let d = hex::encode(sha2::Sha256::digest(&listing));
    // Nothing held at that path.
    let r =
        c.request(json!({"type": "add_listing", "tree": "other", "held_listing": d, "last": true}));
    assert!(
        r["message"].as_str().unwrap().contains("holds no listing"),
        "{r}"
    );
    let r =
        c.request(json!({"type": "add_listing", "tree": "big", "held_listing": d, "last": true}));
    assert_eq!(
        r["detail"],
        json!({"tree": "big", "files": 80, "dirs": 7, "complete": true, "held": true}),
        "{r}"
    );
    // The other tree by its files.
    let files = json!(digest.listing.files);
    let r = c.request(json!({
        "type": "add_listing", "tree": "other", "files": files, "dirs": digest.listing.dirs,
        "last": true,
    }));
    assert_eq!(r["type"], "ok", "{r}");
    fs::create_dir_all(&other).unwrap();
    for f in &digest.listing.files {
        let to = other.join(&f.path);
        fs::create_dir_all(to.parent().unwrap()).unwrap();
        fs::copy(src.join(&f.path), to).unwrap();
    }
    let record = run(&mut c);
    assert_eq!(record["exit_code"], 0, "{record}");
    fs::write(dest.join("d1/f0001.js"), "drifted\n").unwrap();
    let record = run(&mut c);
    assert_eq!(record["exit_code"], 96, "{record}");
    let check = &record["verification"]["trees"][0];
    assert_eq!(check["drift"]["changed"], json!(["d1/f0001.js"]), "{check}");
}
