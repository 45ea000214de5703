//! pi's package manifest resolver (`pitcrew_core::plugin_format::classify` on a directory
//! whose `package.json` is the input: the `pi` manifest, conventional folders, `index.*` and
//! `main` rules) on arbitrary bytes.
//!
//! The input is the root `package.json`; bytes after a first `0xFF` (never valid in JSON text)
//! become the `package.json` of the nested packages. Each input is classified in four fixture
//! layouts, created once: one rich in files, folders, nested packages, special files and
//! symlinks (inside and outside); one with conventional folders; one for `main`; one with two
//! `index.*` files. Invariants: no layout is ever a Claude plugin; a pi extension has at least
//! one entry, sorted and unique, each a relative path without empty or `..` segments (what the
//! manifest accepts) naming a regular file inside the directory reached through no symlink; the
//! `pi` manifest rule is chosen exactly when `package.json` is an object with a `pi` key;
//! registered flags are sorted and unique; classifying twice gives the same answer.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pitcrew_core::plugin_format::{classify, PiRule, PluginClass};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const EXT: &str = "export default function (pi) { pi.registerFlag(\"greeting\", {}); }\n";

/// The fixture layouts, and the nested `package.json` paths that get the second part.
struct Fixture {
    layouts: Vec<PathBuf>,
    nested: Vec<PathBuf>,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let root = tempfile::Builder::new()
            .prefix("pitcrew-fuzz-pi.")
            .tempdir()
            .expect("a fixture directory")
            .keep()
            .canonicalize()
            .expect("canonical fixture directory");
        let files: &[&str] = &[
            "rich/index.ts",
            "rich/src/main.ts",
            "rich/src/util.js",
            "rich/src/notes.md",
            "rich/lib/a.ts",
            "rich/lib/b.js",
            "rich/lib/.hidden.ts",
            "rich/lib/node_modules/x.ts",
            "rich/lib/sub/index.ts",
            "rich/lib/pkg/e.ts",
            "rich/lib/pkg/index.js",
            "rich/nested/x.ts",
            "rich/nested/y/z.ts",
            "rich/fifodir/index.ts",
            "rich/empty/.keep",
            "conventional/extensions/a.ts",
            "conventional/extensions/b.js",
            "conventional/extensions/sub/index.ts",
            "conventional/extensions/pkg/e.ts",
            "conventional/skills/x.md",
            "main/main.js",
            "main/lib/entry.ts",
            "main/dir/index.js",
            "two/index.js",
            "two/index.ts",
        ];
        for rel in files {
            let path = root.join(rel);
            fs::create_dir_all(path.parent().expect("a parent")).expect("fixture dir");
            fs::write(&path, EXT).expect("fixture file");
        }
        for fifo in ["rich/pipe.ts", "rich/fifodir/package.json"] {
            let status = Command::new("mkfifo")
                .arg(root.join(fifo))
                .status()
                .expect("mkfifo runs");
            assert!(status.success(), "mkfifo {fifo}");
        }
        let links: &[(&str, &str)] = &[
            ("/etc/hostname", "rich/link.ts"),
            ("/etc", "rich/linkdir"),
            ("src/main.ts", "rich/inlink.ts"),
            ("lib", "rich/inlinkdir"),
        ];
        for (target, link) in links {
            std::os::unix::fs::symlink(target, root.join(link)).expect("symlink");
        }
        Fixture {
            layouts: ["rich", "conventional", "main", "two"]
                .iter()
                .map(|l| root.join(l))
                .collect(),
            nested: [
                "rich/lib/pkg/package.json",
                "rich/nested/package.json",
                "conventional/extensions/pkg/package.json",
            ]
            .iter()
            .map(|n| root.join(n))
            .collect(),
        }
    })
}

/// Checks a pi extension's entries against the directory.
fn check_entries(dir: &Path, rule: PiRule, entries: &[String]) {
    assert!(
        !entries.is_empty(),
        "{rule:?}: a pi extension without entries"
    );
    assert!(
        entries.windows(2).all(|w| w[0] < w[1]),
        "entries not sorted and unique: {entries:?}"
    );
    for entry in entries {
        assert!(
            !entry.starts_with('/') && !entry.split('/').any(|s| s.is_empty() || s == ".."),
            "{entry:?} is not a relative path inside the tree"
        );
        let mut path = dir.to_path_buf();
        for seg in entry.split('/') {
            path.push(seg);
            let meta = fs::symlink_metadata(&path).expect("an entry exists");
            assert!(
                !meta.file_type().is_symlink(),
                "{entry:?} goes through a symlink"
            );
        }
        assert!(
            fs::symlink_metadata(&path).expect("entry").is_file(),
            "{entry:?} is not a regular file"
        );
        assert!(fs::canonicalize(&path).expect("canonical").starts_with(dir));
    }
}

fn outcome(r: &Result<PluginClass, pitcrew_core::plugin_format::ClassifyError>) -> String {
    match r {
        Ok(class) => format!("{class:?}"),
        Err(e) => format!("error: {e}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let fx = fixture();
    let (root_json, nested_json) = match data.iter().position(|&b| b == 0xff) {
        Some(i) => (&data[..i], Some(&data[i + 1..])),
        None => (data, None),
    };
    for path in &fx.nested {
        match nested_json {
            Some(text) => fs::write(path, text).expect("nested package.json"),
            None => {
                let _ = fs::remove_file(path);
            }
        }
    }
    let has_pi_key = serde_json::from_slice::<serde_json::Value>(root_json)
        .ok()
        .and_then(|v| v.as_object().map(|o| o.contains_key("pi")))
        .unwrap_or(false);
    for dir in &fx.layouts {
        fs::write(dir.join("package.json"), root_json).expect("package.json");
        let result = classify(dir);
        assert_eq!(
            outcome(&result),
            outcome(&classify(dir)),
            "not deterministic"
        );
        match result {
            Ok(PluginClass::Claude(c)) => panic!("no layout is a Claude plugin: {c:?}"),
            Ok(PluginClass::Codex(c)) => panic!("no layout is a Codex plugin: {c:?}"),
            // Only a tree holding `plugin/` or `plugins/` and no pi entry is OpenCode's.
            Ok(PluginClass::Opencode(o)) => panic!("no layout is an OpenCode plugin: {o:?}"),
            Ok(PluginClass::Pi(ext)) => {
                assert_eq!(ext.rule == PiRule::Manifest, has_pi_key, "{:?}", ext.rule);
                check_entries(dir, ext.rule, &ext.entries);
                assert!(ext.registered_flags.windows(2).all(|w| w[0] < w[1]));
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
});
