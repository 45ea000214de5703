//! The harness parser and validator (`pitcrew_core::harness::validate`, what `pitcrew
//! validate` and `pitcrew run` call) on arbitrary bytes as `harness.yaml`.
//!
//! The file sits in a fixture directory with real plugins (a pi extension, a pi package, a
//! Claude plugin, a directory that is neither), adapters, a skills directory, a workspace and
//! two symlinks (one inside, one to `/etc`), so that paths a mutated harness names reach the
//! deep checks. Invariants: problems come sorted by position; every host path that passed stays
//! inside the harness directory; a clean harness has a manifest, which validates and
//! re-serialises to the same value, and a harness with problems has none; the report the
//! host prints as JSON serialises.
//!
//! The YAML loader has internal `unreachable!`s that `harness::validate` catches on purpose
//! (the CLI reports "the YAML parser failed on this input"). libFuzzer's panic hook aborts on
//! every panic, caught or not, so this target lets panics raised inside the YAML crates unwind
//! to that `catch_unwind`; any other panic still aborts.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pitcrew_core::harness::{self, SandboxLayout};
use pitcrew_core::manifest::Manifest;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const EXT: &str = r#"export default function (pi) {
  pi.registerFlag("greeting", { type: "string" });
  pi.registerFlag("loud", { type: "boolean" });
}
"#;

/// The fixture directory, created once per process; panics from the YAML crates unwind.
fn fixture() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_yaml = info.location().is_some_and(|l| {
                let file = l.file();
                file.contains("/marked-yaml-") || file.contains("/yaml-rust2-")
            });
            if !in_yaml {
                previous(info);
            }
        }));

        let dir = tempfile::Builder::new()
            .prefix("pitcrew-fuzz-harness.")
            .tempdir()
            .expect("a fixture directory")
            .keep()
            .canonicalize()
            .expect("canonical fixture directory");
        let files: &[(&str, &str)] = &[
            ("plugins/hello/index.ts", EXT),
            (
                "plugins/pkg/package.json",
                r#"{"name":"pkg","pi":{"extensions":["./src/main.ts"]}}"#,
            ),
            ("plugins/pkg/src/main.ts", EXT),
            (
                "plugins/claudy/.claude-plugin/plugin.json",
                r#"{"name":"claude-demo"}"#,
            ),
            ("plugins/claudy/hooks/hooks.json", r#"{"hooks":{}}"#),
            ("plugins/empty/README.md", "not a plugin\n"),
            ("adapters/hooks.json", "{}\n"),
            ("adapters/hooks.js", "module.exports = {};\n"),
            ("config/models.json", r#"{"providers":{}}"#),
            ("skills/review/SKILL.md", "# review\n"),
            ("workspace/README.md", "workspace\n"),
        ];
        for (rel, text) in files {
            let path = dir.join(rel);
            fs::create_dir_all(path.parent().expect("a parent")).expect("fixture dir");
            fs::write(&path, text).expect("fixture file");
        }
        std::os::unix::fs::symlink("plugins/hello", dir.join("inside")).expect("symlink");
        std::os::unix::fs::symlink("/etc", dir.join("outside")).expect("symlink");
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let base = fixture();
    let file = base.join("harness.yaml");
    fs::write(&file, data).expect("harness.yaml");
    let Ok(validated) = harness::validate(&file) else {
        return;
    };

    let positions: Vec<_> = validated
        .problems
        .iter()
        .map(|p| p.location.map(|l| (l.line, l.column)))
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] <= w[1]),
        "problems not sorted"
    );
    for p in validated.problems.iter().chain(&validated.notes) {
        let _ = p.to_string();
    }
    serde_json::to_string(&validated).expect("the report serialises");

    if let Some(h) = &validated.harness {
        let inside = h
            .plugins
            .iter()
            .map(|p| &p.host_path)
            .chain(h.skills.iter().map(|s| &s.host_path))
            .chain(h.adapters.iter().map(|a| &a.host_path))
            .chain(h.workdir.as_ref())
            .chain([&h.output]);
        for path in inside {
            assert!(
                path.starts_with(base),
                "{} escapes the harness directory",
                path.display()
            );
        }
    }

    let manifest = validated.manifest(&SandboxLayout::default());
    if !validated.is_ok() {
        assert!(manifest.is_none(), "a harness with problems has a manifest");
        return;
    }
    let manifest = manifest.expect("a clean harness has a manifest");
    if let Err(e) = manifest.validate() {
        panic!("the manifest of a clean harness is invalid: {e}");
    }
    let again = Manifest::from_json(manifest.to_json_pretty().as_bytes())
        .expect("the manifest of a clean harness parses");
    assert_eq!(again, manifest, "the manifest does not round-trip");
});
