//! The manifest's per-file listings through the real server: kept on disk between iterations
//! (given in the manifest, or in `add_listing` requests after `set_manifest` with
//! `listings_follow`), read back to explain a drift, and refused once changed behind the
//! supervisor's back.

#![allow(missing_docs)]

mod common;

use common::server::{Client, Server};
use common::{require_root_and_namespaces, Sandbox};
use pitcrew_core::protocol::FrameKind;
use pitcrew_core::tree_hash::{hash_tree, TreeFormat};
use serde_json::{json, Value};
use std::fs;
use std::path::Path;

/// A tree of `files` files in two directories, and its pin without its listing.
fn tree(sandbox: &Sandbox, files: usize) -> (std::path::PathBuf, Value, Value, Value) {
    let tree = sandbox.path("plugins/big");
    fs::create_dir_all(tree.join("lib/deep")).unwrap();
    for i in 0..files {
        let dir = if i % 2 == 0 { "lib" } else { "lib/deep" };
        fs::write(tree.join(format!("{dir}/f{i}.js")), format!("{i}\n")).unwrap();
    }
    let digest = hash_tree(&tree, TreeFormat::ContentV1).unwrap();
    let pin = json!({
        "name": "big", "path": tree, "role": "plugin", "kind": "data", "format": "content-v1",
        "sha256": digest.sha256,
    });
    (
        tree,
        pin,
        json!(digest.listing.files),
        json!(digest.listing.dirs),
    )
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

fn drifted_paths(record: &Value, kind: &str) -> Vec<String> {
    let check = &record["verification"]["trees"][0];
    assert_eq!(check["status"], "drifted", "{record}");
    check["drift"][kind]
        .as_array()
        .unwrap_or_else(|| panic!("no drift.{kind}: {check}"))
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect()
}

fn listing_files(server: &Server) -> Vec<std::path::PathBuf> {
    let dir = server.records.join("listings");
    fs::read_dir(&dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

#[test]
fn listings_sent_in_parts_explain_a_drift_and_a_run_waits_for_the_last_part() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let mut sb = Sandbox::sh("exit 0");
    let (tree, pin, files, dirs) = tree(&sb, 50);
    sb.manifest["trees"] = json!([pin]);
    let mut c = server.connect();
    let r = c
        .request(json!({"type": "set_manifest", "manifest": sb.manifest, "listings_follow": true}));
    assert_eq!(r["type"], "ok", "{r}");
    let files = files.as_array().unwrap();
    let r = c.request(json!({"type": "add_listing", "tree": "big", "files": files[..20]}));
    assert_eq!(
        r["detail"],
        json!({"tree": "big", "files": 20, "dirs": 0, "complete": false})
    );
    // A drift explained against part of the listing would name files that are there.
    let r = c.request(json!({"type": "run"}));
    assert_eq!(r["type"], "error", "{r}");
    assert_eq!(r["kind"], "order", "{r}");
    assert!(r["message"].as_str().unwrap().contains("\"big\""), "{r}");
    let r = c.request(json!({"type": "add_listing", "tree": "nope", "files": []}));
    assert_eq!(r["kind"], "refused", "{r}");
    let r = c.request(json!({
        "type": "add_listing", "tree": "big", "files": files[20..], "dirs": dirs, "last": true,
    }));
    assert_eq!(
        r["detail"],
        json!({"tree": "big", "files": 50, "dirs": 2, "complete": true})
    );
    let r = c.request(json!({"type": "add_listing", "tree": "big", "files": [], "last": true}));
    assert_eq!(r["kind"], "order", "a complete listing takes no more: {r}");
    let record = run(&mut c);
    assert_eq!(record["exit_code"], 0, "{record}");
    fs::write(tree.join("lib/f4.js"), "changed\n").unwrap();
    fs::remove_file(tree.join("lib/deep/f7.js")).unwrap();
    let record = run(&mut c);
    assert_eq!(record["exit_code"], 96, "{record}");
    assert_eq!(drifted_paths(&record, "changed"), ["lib/f4.js"]);
    assert_eq!(drifted_paths(&record, "removed"), ["lib/deep/f7.js"]);
}

#[test]
fn a_listing_given_in_the_manifest_is_kept_on_disk_and_refused_once_changed_there() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let mut sb = Sandbox::sh("exit 0");
    let (tree, mut pin, files, dirs) = tree(&sb, 10);
    pin["files"] = files;
    pin["dirs"] = dirs;
    sb.manifest["trees"] = json!([pin]);
    let mut c = server.connect();
    let r = c.request(json!({"type": "set_manifest", "manifest": sb.manifest}));
    assert_eq!(r["type"], "ok", "{r}");
    let stored = listing_files(&server);
    assert_eq!(stored.len(), 1, "{stored:?}");
    let mode = fs::metadata(&stored[0]).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );
    fs::write(tree.join("lib/f2.js"), "changed\n").unwrap();
    let record = run(&mut c);
    assert_eq!(drifted_paths(&record, "changed"), ["lib/f2.js"]);
    // The listing explains; it never decides. Edited on disk, it is not believed.
    let text = fs::read_to_string(&stored[0]).unwrap();
    fs::write(&stored[0], text.replace("lib/f2.js", "lib/f9.js")).unwrap();
    let record = run(&mut c);
    assert_eq!(record["exit_code"], 96, "{record}");
    let check = &record["verification"]["trees"][0];
    assert!(check["drift"].is_null(), "{check}");
    let error = check["error"].as_str().unwrap();
    assert!(
        error.contains("changed since the supervisor wrote it"),
        "{error}"
    );
    // A new manifest replaces the listings on disk.
    let mut bare = sb.manifest.clone();
    bare["trees"] = json!([]);
    let r = c.request(json!({"type": "set_manifest", "manifest": bare}));
    assert_eq!(r["type"], "ok", "{r}");
    assert!(listing_files(&server).is_empty());
    assert!(!Path::new(&stored[0]).exists());
}
