//! Classification of plugin directories built in tempdirs: one test per rule and per refusal,
//! including every case where pi would load a directory silently as nothing (a `package.json`
//! whose `pi` key names no resources, a `main` that does not exist, …).

use pitcrew_core::plugin_format::{
    classify, registered_flags, ClassifyError, EntryProblem, ManifestProblem, PiRule, PluginClass,
};
use std::fs;
use std::path::Path;

const EXT: &str = "export default function (pi) {}\n";

/// A tempdir holding `files`: `(path, contents)`; a path ending in `/` is an empty directory.
fn fixture(files: &[(&str, &str)]) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for (path, contents) in files {
        let full = tmp.path().join(path);
        if path.ends_with('/') {
            fs::create_dir_all(&full).unwrap();
        } else {
            fs::create_dir_all(full.parent().unwrap()).unwrap();
            fs::write(&full, contents).unwrap();
        }
    }
    tmp
}

fn pi(dir: &Path) -> (PiRule, Vec<String>) {
    match classify(dir) {
        Ok(PluginClass::Pi(p)) => (p.rule, p.entries),
        other => panic!("expected a pi extension, got {other:?}"),
    }
}

fn err(dir: &Path) -> ClassifyError {
    match classify(dir) {
        Err(e) => e,
        Ok(c) => panic!("expected a refusal, got {c:?}"),
    }
}

fn entry_problem(dir: &Path) -> EntryProblem {
    match err(dir) {
        ClassifyError::PiEntry { problem, .. } => problem,
        other => panic!("expected a pi.extensions entry refusal, got {other}"),
    }
}

fn manifest_problem(dir: &Path) -> ManifestProblem {
    match err(dir) {
        ClassifyError::PiManifest { problem, .. } => problem,
        other => panic!("expected a pi manifest refusal, got {other}"),
    }
}

// ---- Claude -------------------------------------------------------------------------------

#[test]
fn claude_dot_manifest() {
    let d = fixture(&[(".claude-plugin/plugin.json", r#"{"name":"review"}"#)]);
    let PluginClass::Claude(c) = classify(d.path()).unwrap() else {
        panic!()
    };
    assert_eq!(c.manifest, ".claude-plugin/plugin.json");
    assert_eq!(c.name, "review");
    assert!(!c.has_hooks && !c.has_mcp && !c.has_bin);
}

#[test]
fn claude_root_manifest_with_code_surfaces() {
    let d = fixture(&[
        ("plugin.json", r#"{"name":"tools"}"#),
        ("hooks/hooks.json", "{}"),
        (".mcp.json", "{}"),
        ("bin/run", "#!/bin/sh\n"),
    ]);
    let class = classify(d.path()).unwrap();
    assert_eq!(class.kind(), "claude");
    let PluginClass::Claude(c) = class else {
        panic!()
    };
    assert_eq!(c.manifest, "plugin.json");
    assert!(c.has_hooks && c.has_mcp && c.has_bin);
}

#[test]
fn claude_inline_hooks_and_mcp_count() {
    let d = fixture(&[
        (
            ".claude-plugin/plugin.json",
            r#"{"name":"x","hooks":"./h.json","mcpServers":{}}"#,
        ),
        ("h.json", r#"{"hooks":{}}"#),
    ]);
    let PluginClass::Claude(c) = classify(d.path()).unwrap() else {
        panic!()
    };
    assert!(c.has_hooks && c.has_mcp && !c.has_bin);
    // A root `plugin.json` only marks the directory: Claude never reads its keys.
    let d = fixture(&[(
        "plugin.json",
        r#"{"name":"x","hooks":"./h.json","mcpServers":{}}"#,
    )]);
    let PluginClass::Claude(c) = classify(d.path()).unwrap() else {
        panic!()
    };
    assert!(!c.has_hooks && !c.has_mcp);
}

#[test]
fn claude_component_paths_that_exist_inside_the_plugin_are_accepted() {
    let d = fixture(&[
        (
            ".claude-plugin/plugin.json",
            r#"{"name":"x","skills":".","commands":["./cmds/","./more/hello.md"],
                "hooks":"./config/hooks.json","mcpServers":{"s":{"command":"x"}},
                "experimental":{"monitors":"./mon/monitors.json"}}"#,
        ),
        ("cmds/a.md", "a"),
        ("more/hello.md", "b"),
        ("config/hooks.json", "{}"),
        ("mon/monitors.json", "{}"),
    ]);
    assert_eq!(classify(d.path()).unwrap().kind(), "claude");
}

#[test]
fn claude_component_paths_claude_would_not_load_are_refused() {
    let cases = [
        (r#""commands":"./nope""#, "names nothing in the plugin"),
        (
            r#""agents":["./agents/x.md","./missing/x.md"]"#,
            "names nothing in the plugin",
        ),
        (r#""agents":"./agents""#, "must end with `.md`"),
        (
            r#""commands":{"hi":{"source":"./nope.md"}}"#,
            "names nothing in the plugin",
        ),
        (r#""themes":"./nothemes""#, "names nothing in the plugin"),
        (r#""mcpServers":"https://example.com/s.mcpb""#, "is a URL"),
        (r#""commands":"cmds""#, "must start with `./`"),
        (r#""commands":"/etc""#, "must start with `./`"),
        (r#""skills":"./../outside""#, "contains `..`"),
        (r#""hooks":"./agents/x.md""#, "must end with `.json`"),
        (r#""outputStyles":"./""#, "does not name a file or folder"),
        (
            r#""experimental":{"themes":"./nothemes"}"#,
            "names nothing in the plugin",
        ),
    ];
    for (field, problem) in cases {
        let manifest = format!(r#"{{"name":"x",{field}}}"#);
        let d = fixture(&[
            (".claude-plugin/plugin.json", manifest.as_str()),
            ("agents/x.md", "a"),
        ]);
        let e = err(d.path());
        assert!(
            matches!(e, ClassifyError::ClaudeComponentPath { .. }),
            "{field}: {e}"
        );
        let text = e.to_string();
        assert!(text.contains(problem), "{field}: {text}");
        assert!(
            text.contains("`.claude-plugin/plugin.json`") && text.contains("component path rule"),
            "{text}"
        );
    }
}

#[test]
fn claude_component_path_through_a_symlink_is_refused() {
    let d = fixture(&[
        (
            ".claude-plugin/plugin.json",
            r#"{"name":"x","commands":"./cmds/a.md"}"#,
        ),
        ("real/a.md", "a"),
    ]);
    std::os::unix::fs::symlink("real", d.path().join("cmds")).unwrap();
    assert!(matches!(err(d.path()), ClassifyError::Symlink { .. }));
}

#[test]
fn claude_plugin_with_package_json_stays_claude() {
    // A Claude plugin bundling a Node MCP server: package.json with main (even a pi key).
    let d = fixture(&[
        (".claude-plugin/plugin.json", r#"{"name":"mcp-bundle"}"#),
        (
            "package.json",
            r#"{"main":"server.js","pi":{"extensions":["server.js"]}}"#,
        ),
        ("server.js", EXT),
        ("index.ts", EXT),
        ("skills/s/SKILL.md", "x"),
    ]);
    assert_eq!(classify(d.path()).unwrap().kind(), "claude");
}

#[test]
fn claude_manifest_invalid_json_names_file() {
    let d = fixture(&[(".claude-plugin/plugin.json", "{name:")]);
    let e = err(d.path());
    assert!(
        matches!(&e, ClassifyError::BadJson { file, .. } if file == ".claude-plugin/plugin.json")
    );
    assert!(e.to_string().contains(".claude-plugin/plugin.json"), "{e}");
}

#[test]
fn claude_manifest_not_object() {
    let d = fixture(&[("plugin.json", r#"["name"]"#)]);
    let e = err(d.path());
    assert!(matches!(e, ClassifyError::ClaudeManifest { .. }), "{e}");
    assert!(e.to_string().contains("not a JSON object"), "{e}");
}

#[test]
fn claude_manifest_without_name() {
    let d = fixture(&[("plugin.json", r#"{"version":"1.0.0"}"#)]);
    let e = err(d.path());
    assert!(e.to_string().contains("has no `name`"), "{e}");
    let d = fixture(&[("plugin.json", r#"{"name":""}"#)]);
    assert!(matches!(
        err(d.path()),
        ClassifyError::ClaudeManifest { .. }
    ));
}

#[test]
fn claude_two_manifests_must_agree() {
    let d = fixture(&[
        ("plugin.json", r#"{"name":"a"}"#),
        (".claude-plugin/plugin.json", r#"{"name":"b"}"#),
    ]);
    assert!(matches!(
        err(d.path()),
        ClassifyError::ClaudeManifestsDisagree { .. }
    ));
    let d = fixture(&[
        ("plugin.json", r#"{"name":"a"}"#),
        (".claude-plugin/plugin.json", r#"{"name":"a"}"#),
    ]);
    let PluginClass::Claude(c) = classify(d.path()).unwrap() else {
        panic!()
    };
    assert_eq!(c.manifest, ".claude-plugin/plugin.json");
}

// ---- pi: manifest mode ---------------------------------------------------------------------

#[test]
fn manifest_entries_only() {
    // `pi.extensions: ["./src/main.ts"]` (+ index.ts): src/main.ts only.
    let d = fixture(&[
        (
            "package.json",
            r#"{"pi":{"extensions":["./src/main.ts","src//other.ts","./src/main.ts"]}}"#,
        ),
        ("src/main.ts", EXT),
        ("src/other.ts", EXT),
        ("index.ts", EXT),
    ]);
    assert_eq!(
        pi(d.path()),
        (
            PiRule::Manifest,
            vec!["src/main.ts".into(), "src/other.ts".into()]
        )
    );
}

#[test]
fn manifest_directory_entry_uses_folder_rule() {
    // `pi.extensions: ["./plug"]` → plug/*.ts + plug/*/index.ts (one level).
    let d = fixture(&[
        ("package.json", r#"{"pi":{"extensions":["./plug"]}}"#),
        ("plug/a.ts", EXT),
        ("plug/b.js", EXT),
        ("plug/readme.md", "x"),
        ("plug/.hidden.ts", EXT),
        ("plug/node_modules/dep/index.ts", EXT),
        ("plug/sub/index.ts", EXT),
        ("plug/sub/deeper.ts", EXT),
        ("plug/both/index.ts", EXT),
        ("plug/both/index.js", EXT),
        ("plug/empty/", ""),
        ("plug/deep/x/index.ts", EXT),
    ]);
    assert_eq!(
        pi(d.path()),
        (
            PiRule::Manifest,
            vec![
                "plug/a.ts".into(),
                "plug/b.js".into(),
                "plug/both/index.ts".into(),
                "plug/sub/index.ts".into(),
            ]
        )
    );
}

#[test]
fn manifest_directory_entry_with_own_index_or_package() {
    let d = fixture(&[
        ("package.json", r#"{"pi":{"extensions":["plug","other"]}}"#),
        ("plug/index.js", EXT),
        ("plug/a.ts", EXT),
        (
            "other/package.json",
            r#"{"pi":{"extensions":["lib/x.ts"]}}"#,
        ),
        ("other/lib/x.ts", EXT),
        ("other/index.ts", EXT),
    ]);
    assert_eq!(
        pi(d.path()),
        (
            PiRule::Manifest,
            vec!["other/lib/x.ts".into(), "plug/index.js".into()]
        )
    );
}

#[test]
fn manifest_directory_entry_yielding_nothing() {
    let d = fixture(&[
        ("package.json", r#"{"pi":{"extensions":["plug"]}}"#),
        ("plug/readme.md", "x"),
    ]);
    assert_eq!(
        entry_problem(d.path()),
        EntryProblem::DirectoryYieldsNothing
    );
}

#[test]
fn manifest_pi_empty_object() {
    // `{"pi":{}}` + index.ts: 0.73 loads nothing, 1.6 loads index.ts.
    let d = fixture(&[("package.json", r#"{"pi":{}}"#), ("index.ts", EXT)]);
    assert_eq!(manifest_problem(d.path()), ManifestProblem::Empty);
    let msg = err(d.path()).to_string();
    assert!(
        msg.contains("no extension entries") && msg.contains("silently"),
        "{msg}"
    );
    let d = fixture(&[
        ("package.json", r#"{"pi":{"image":"x.png"}}"#),
        ("index.ts", EXT),
    ]);
    assert_eq!(manifest_problem(d.path()), ManifestProblem::Empty);
}

#[test]
fn manifest_pi_not_an_object() {
    // `{"pi":"yes"}` + index.ts: 0.73 loads nothing, 1.6 loads index.ts.
    for pi_value in [r#""yes""#, "true", "[]", "null", "1"] {
        let d = fixture(&[
            ("package.json", &format!(r#"{{"pi":{pi_value}}}"#)),
            ("index.ts", EXT),
        ]);
        assert!(
            matches!(
                manifest_problem(d.path()),
                ManifestProblem::NotAnObject { .. }
            ),
            "{pi_value}"
        );
    }
    let d = fixture(&[("package.json", r#"{"pi":"yes"}"#), ("index.ts", EXT)]);
    let msg = err(d.path()).to_string();
    assert!(msg.contains(r#"is "yes", not an object"#), "{msg}");
}

#[test]
fn manifest_empty_extensions() {
    let d = fixture(&[
        ("package.json", r#"{"pi":{"extensions":[]}}"#),
        ("index.ts", EXT),
    ]);
    assert_eq!(manifest_problem(d.path()), ManifestProblem::NoExtensions);
    assert!(err(d.path()).to_string().contains("`extensions: []`"));
}

#[test]
fn manifest_only_skills() {
    let d = fixture(&[
        ("package.json", r#"{"pi":{"skills":["./skills"]}}"#),
        ("skills/s/SKILL.md", "x"),
        ("index.ts", EXT),
    ]);
    assert_eq!(
        manifest_problem(d.path()),
        ManifestProblem::OnlyOtherResources {
            kinds: vec!["skills".into()]
        }
    );
}

#[test]
fn manifest_extensions_not_strings() {
    for list in [r#""./a.ts""#, r#"[1]"#, r#"{"a":"./a.ts"}"#] {
        let d = fixture(&[
            (
                "package.json",
                &format!(r#"{{"pi":{{"extensions":{list}}}}}"#),
            ),
            ("a.ts", EXT),
        ]);
        assert_eq!(
            manifest_problem(d.path()),
            ManifestProblem::ExtensionsNotStrings,
            "{list}"
        );
    }
}

#[test]
fn manifest_missing_entry() {
    // `pi.extensions: ["./nope.ts"]` + index.ts: pi drops it and loads nothing.
    let d = fixture(&[
        ("package.json", r#"{"pi":{"extensions":["./nope.ts"]}}"#),
        ("index.ts", EXT),
    ]);
    assert_eq!(entry_problem(d.path()), EntryProblem::Missing);
    let msg = err(d.path()).to_string();
    assert!(
        msg.contains("./nope.ts") && msg.contains("silently drops"),
        "{msg}"
    );
    // One missing among existing ones is refused too.
    let d = fixture(&[
        (
            "package.json",
            r#"{"pi":{"extensions":["a.ts","gone/b.ts"]}}"#,
        ),
        ("a.ts", EXT),
    ]);
    assert_eq!(entry_problem(d.path()), EntryProblem::Missing);
    // A path through a file.
    let d = fixture(&[
        ("package.json", r#"{"pi":{"extensions":["a.ts/b.ts"]}}"#),
        ("a.ts", EXT),
    ]);
    assert_eq!(entry_problem(d.path()), EntryProblem::Missing);
}

#[test]
fn manifest_entry_escaping_the_directory() {
    // `pi.extensions: ["../outside.ts"]`: pi loads the outside file.
    let parent = tempfile::tempdir().unwrap();
    fs::write(parent.path().join("outside.ts"), EXT).unwrap();
    let d = parent.path().join("plug");
    fs::create_dir(&d).unwrap();
    fs::write(
        d.join("package.json"),
        r#"{"pi":{"extensions":["../outside.ts"]}}"#,
    )
    .unwrap();
    assert_eq!(entry_problem(&d), EntryProblem::ParentSegment);
    fs::write(
        d.join("package.json"),
        r#"{"pi":{"extensions":["./sub/../../outside.ts"]}}"#,
    )
    .unwrap();
    assert_eq!(entry_problem(&d), EntryProblem::ParentSegment);
}

#[test]
fn manifest_entry_absolute() {
    let d = fixture(&[("a.ts", EXT)]);
    let abs = d.path().join("a.ts");
    fs::write(
        d.path().join("package.json"),
        format!(r#"{{"pi":{{"extensions":["{}"]}}}}"#, abs.display()),
    )
    .unwrap();
    assert_eq!(entry_problem(d.path()), EntryProblem::Absolute);
}

#[test]
fn manifest_entry_globs_and_patterns() {
    for (entry, want) in [
        ("src/*.ts", EntryProblem::Glob),
        ("src/?.ts", EntryProblem::Glob),
        ("!src/b.ts", EntryProblem::PatternPrefix('!')),
        ("+src/a.ts", EntryProblem::PatternPrefix('+')),
        ("-src/a.ts", EntryProblem::PatternPrefix('-')),
        ("", EntryProblem::Empty),
        (".", EntryProblem::NamesRoot),
        ("./", EntryProblem::NamesRoot),
    ] {
        let d = fixture(&[
            (
                "package.json",
                &format!(r#"{{"pi":{{"extensions":["src/a.ts","{entry}"]}}}}"#),
            ),
            ("src/a.ts", EXT),
            ("src/b.ts", EXT),
        ]);
        assert_eq!(entry_problem(d.path()), want, "{entry:?}");
    }
    let d = fixture(&[
        ("package.json", r#"{"pi":{"extensions":["!./src/b.ts"]}}"#),
        ("src/b.ts", EXT),
    ]);
    assert!(err(d.path()).to_string().contains("silent-failure trap"));
}

#[cfg(unix)]
#[test]
fn manifest_entry_symlinks_refused() {
    use std::os::unix::fs::symlink;
    let outside = fixture(&[("evil.ts", EXT), ("lib/x.ts", EXT)]);
    // A symlinked file.
    let d = fixture(&[("package.json", r#"{"pi":{"extensions":["a.ts"]}}"#)]);
    symlink(outside.path().join("evil.ts"), d.path().join("a.ts")).unwrap();
    assert!(matches!(entry_problem(d.path()), EntryProblem::Symlink(p) if p == "a.ts"));
    // A symlinked folder on the way.
    let d = fixture(&[("package.json", r#"{"pi":{"extensions":["lib/x.ts"]}}"#)]);
    symlink(outside.path().join("lib"), d.path().join("lib")).unwrap();
    assert!(matches!(entry_problem(d.path()), EntryProblem::Symlink(p) if p == "lib"));
    // Even one that stays inside.
    let d = fixture(&[
        ("package.json", r#"{"pi":{"extensions":["b.ts"]}}"#),
        ("a.ts", EXT),
    ]);
    symlink("a.ts", d.path().join("b.ts")).unwrap();
    assert!(matches!(entry_problem(d.path()), EntryProblem::Symlink(_)));
}

#[cfg(unix)]
#[test]
fn symlinked_root_is_followed() {
    use std::os::unix::fs::symlink;
    let real = fixture(&[("index.ts", EXT)]);
    let links = tempfile::tempdir().unwrap();
    let link = links.path().join("plug");
    symlink(real.path(), &link).unwrap();
    assert_eq!(pi(&link), (PiRule::Index, vec!["index.ts".into()]));
}

#[test]
fn package_json_invalid_or_not_object() {
    let d = fixture(&[("package.json", "{\"pi\": "), ("index.ts", EXT)]);
    let e = err(d.path());
    assert!(
        matches!(&e, ClassifyError::BadJson { file, .. } if file == "package.json"),
        "{e}"
    );
    assert!(
        e.to_string().contains("package.json` is not valid JSON"),
        "{e}"
    );
    let d = fixture(&[("package.json", "[]"), ("index.ts", EXT)]);
    assert!(matches!(
        err(d.path()),
        ClassifyError::PackageJsonNotObject { .. }
    ));
}

// ---- pi: conventional folders --------------------------------------------------------------

#[test]
fn conventional_extensions_folder() {
    let d = fixture(&[
        ("extensions/a.ts", EXT),
        ("extensions/sub/index.ts", EXT),
        ("extensions/notes.txt", "x"),
        ("skills/s/SKILL.md", "x"),
    ]);
    assert_eq!(
        pi(d.path()),
        (
            PiRule::ConventionalDirs,
            vec!["extensions/a.ts".into(), "extensions/sub/index.ts".into()]
        )
    );
}

#[test]
fn conventional_extensions_folder_with_own_index_or_manifest() {
    let d = fixture(&[("extensions/index.ts", EXT), ("extensions/a.ts", EXT)]);
    assert_eq!(
        pi(d.path()),
        (PiRule::ConventionalDirs, vec!["extensions/index.ts".into()])
    );
    let d = fixture(&[
        (
            "extensions/package.json",
            r#"{"pi":{"extensions":["./x/y.ts"]}}"#,
        ),
        ("extensions/x/y.ts", EXT),
        ("extensions/a.ts", EXT),
    ]);
    assert_eq!(
        pi(d.path()),
        (PiRule::ConventionalDirs, vec!["extensions/x/y.ts".into()])
    );
    // A nested manifest's missing entry is refused (pi drops it and falls back silently).
    let d = fixture(&[
        (
            "extensions/sub/package.json",
            r#"{"pi":{"extensions":["nope.ts"]}}"#,
        ),
        ("extensions/sub/index.ts", EXT),
    ]);
    assert_eq!(entry_problem(d.path()), EntryProblem::Missing);
}

#[test]
fn conventional_shadows_root_index() {
    // `extensions/a.ts`, `extensions/sub/index.ts`, root `index.ts`: root ignored.
    let d = fixture(&[
        ("extensions/a.ts", EXT),
        ("extensions/sub/index.ts", EXT),
        ("index.ts", EXT),
    ]);
    let e = err(d.path());
    assert!(
        matches!(e, ClassifyError::ShadowedByConventionalDirs { .. }),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("root `index.ts` would be silently ignored"),
        "{e}"
    );
}

#[test]
fn skills_folder_shadows_root_index() {
    // `index.ts` + `skills/`: pi loads the skills only.
    let d = fixture(&[("index.ts", EXT), ("skills/s/SKILL.md", "x")]);
    let msg = err(d.path()).to_string();
    assert!(
        msg.contains(
            "skills/ present: pi loads skills only; root `index.ts` would be silently ignored"
        ),
        "{msg}"
    );
    // Even a file named `skills`.
    let d = fixture(&[("index.ts", EXT), ("skills", "")]);
    assert!(matches!(
        err(d.path()),
        ClassifyError::ShadowedByConventionalDirs { .. }
    ));
}

#[test]
fn prompts_folder_shadows_root_index() {
    // `prompts/` + `index.ts`: nothing loaded as code.
    let d = fixture(&[("index.ts", EXT), ("prompts/p.md", "x")]);
    assert!(matches!(
        err(d.path()),
        ClassifyError::ShadowedByConventionalDirs { .. }
    ));
}

#[test]
fn conventional_shadows_main() {
    let d = fixture(&[
        ("package.json", r#"{"main":"lib/entry.ts"}"#),
        ("lib/entry.ts", EXT),
        ("themes/t.json", "{}"),
    ]);
    let msg = err(d.path()).to_string();
    assert!(
        msg.contains("package.json `main` \"lib/entry.ts\""),
        "{msg}"
    );
    // A main that is one of the entries is fine.
    let d = fixture(&[
        ("package.json", r#"{"main":"./extensions/a.ts"}"#),
        ("extensions/a.ts", EXT),
    ]);
    assert_eq!(
        pi(d.path()),
        (PiRule::ConventionalDirs, vec!["extensions/a.ts".into()])
    );
}

#[test]
fn conventional_without_extension_entries() {
    let d = fixture(&[("skills/s/SKILL.md", "x")]);
    assert!(matches!(
        err(d.path()),
        ClassifyError::ConventionalDirsWithoutEntries { .. }
    ));
    let d = fixture(&[
        ("extensions/readme.md", "x"),
        ("extensions/deep/x/a.ts", EXT),
    ]);
    assert!(matches!(
        err(d.path()),
        ClassifyError::ConventionalDirsWithoutEntries { .. }
    ));
    let d = fixture(&[("extensions", "not a folder")]);
    assert!(matches!(
        err(d.path()),
        ClassifyError::ConventionalDirsWithoutEntries { .. }
    ));
}

// ---- pi: directory as a module -------------------------------------------------------------

#[test]
fn index_ts_only() {
    let d = fixture(&[("index.ts", EXT), ("lib/helper.ts", EXT)]);
    assert_eq!(pi(d.path()), (PiRule::Index, vec!["index.ts".into()]));
}

#[test]
fn index_other_extensions() {
    for name in ["index.js", "index.mts", "index.cjs", "index.tsx"] {
        let d = fixture(&[(name, EXT)]);
        assert_eq!(pi(d.path()), (PiRule::Index, vec![name.into()]));
    }
}

#[test]
fn index_js_and_index_ts_is_ambiguous() {
    let d = fixture(&[("index.ts", EXT), ("index.js", EXT)]);
    let msg = err(d.path()).to_string();
    assert!(msg.contains("pi loads index.js, not index.ts"), "{msg}");
    let d = fixture(&[("index.mjs", EXT), ("index.ts", EXT), ("index.cts", EXT)]);
    assert!(matches!(
        err(d.path()),
        ClassifyError::AmbiguousIndex { candidates, .. }
            if candidates == ["index.mjs", "index.ts", "index.cts"]
    ));
}

#[test]
fn package_main() {
    // `main` → `lib/entry.ts`, no index: loads via main.
    let d = fixture(&[
        ("package.json", r#"{"name":"x","main":"./lib/entry.ts"}"#),
        ("lib/entry.ts", EXT),
    ]);
    assert_eq!(
        pi(d.path()),
        (PiRule::PackageMain, vec!["lib/entry.ts".into()])
    );
}

#[test]
fn package_main_refusals() {
    for (main, want) in [
        (r#""lib/entry""#, EntryProblem::Missing),
        (r#""lib""#, EntryProblem::IsADirectory),
        (r#""../x.ts""#, EntryProblem::ParentSegment),
        (r#""/etc/passwd""#, EntryProblem::Absolute),
        ("42", EntryProblem::NotAString),
    ] {
        let d = fixture(&[
            ("package.json", &format!(r#"{{"main":{main}}}"#)),
            ("lib/entry.ts", EXT),
        ]);
        match err(d.path()) {
            ClassifyError::PackageMain { problem, .. } => assert_eq!(problem, want, "{main}"),
            other => panic!("{main}: {other}"),
        }
    }
}

#[test]
fn main_shadowed_by_index() {
    let d = fixture(&[
        ("package.json", r#"{"main":"dist/index.js"}"#),
        ("dist/index.js", EXT),
        ("index.ts", EXT),
    ]);
    assert!(matches!(
        err(d.path()),
        ClassifyError::MainShadowedByIndex { .. }
    ));
    // main naming the index itself is fine.
    let d = fixture(&[
        ("package.json", r#"{"main":"./index.js"}"#),
        ("index.js", EXT),
    ]);
    assert_eq!(pi(d.path()), (PiRule::Index, vec!["index.js".into()]));
}

// ---- neither -------------------------------------------------------------------------------

#[test]
fn only_foo_ts_is_not_a_plugin() {
    let d = fixture(&[("foo.ts", EXT)]);
    let e = err(d.path());
    assert!(matches!(e, ClassifyError::NotAPlugin { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("no runtime would load this directory"),
        "{e}"
    );
}

#[test]
fn empty_dir_is_not_a_plugin() {
    let d = fixture(&[]);
    assert!(matches!(err(d.path()), ClassifyError::NotAPlugin { .. }));
    let d = fixture(&[("package.json", r#"{"name":"x"}"#), (".claude-plugin/", "")]);
    assert!(matches!(err(d.path()), ClassifyError::NotAPlugin { .. }));
}

#[test]
fn missing_dir_and_file_are_errors() {
    let d = fixture(&[("f", "")]);
    let missing = d.path().join("nope");
    let e = err(&missing);
    assert!(matches!(e, ClassifyError::Io { .. }), "{e}");
    assert!(
        e.to_string().starts_with(&missing.display().to_string()),
        "{e}"
    );
    assert!(matches!(
        err(&d.path().join("f")),
        ClassifyError::NotADirectory { .. }
    ));
}

#[test]
fn messages_name_the_directory() {
    let d = fixture(&[("package.json", r#"{"pi":{"extensions":[]}}"#)]);
    let msg = err(d.path()).to_string();
    assert!(
        msg.starts_with(&format!(
            "{}: `package.json` `pi` manifest lists no extension entries",
            d.path().display()
        )),
        "{msg}"
    );
}

// ---- flags and serialization ---------------------------------------------------------------

#[test]
fn flags_scanned_across_sources() {
    let d = fixture(&[
        (
            "index.ts",
            "import x from './lib/more';\nexport default (pi) => { pi.registerFlag(\"loud\", {type: \"boolean\"}); }\n",
        ),
        ("lib/more.mjs", "pi.registerFlag( 'mode', {});\npi.registerFlag(`loud`)\n"),
        ("lib/notes.md", "pi.registerFlag(\"docs-only\")"),
        ("node_modules/dep/index.js", "pi.registerFlag(\"vendored\")"),
    ]);
    assert_eq!(registered_flags(d.path()).unwrap(), ["loud", "mode"]);
    let PluginClass::Pi(p) = classify(d.path()).unwrap() else {
        panic!()
    };
    assert_eq!(p.registered_flags, ["loud", "mode"]);
}

#[test]
fn flags_of_missing_dir_is_an_error() {
    let d = fixture(&[]);
    assert!(registered_flags(&d.path().join("nope")).is_err());
}

#[test]
fn serialized_shape() {
    let d = fixture(&[(
        "index.ts",
        "pi.registerFlag('x'); pi.registerTool({ name: 't' })",
    )]);
    let v = serde_json::to_value(classify(d.path()).unwrap()).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"kind":"pi","rule":"index","entries":["index.ts"],"registered_flags":["x"],"registered_tools":["t"]})
    );
    let d = fixture(&[("extensions/a.ts", EXT)]);
    let v = serde_json::to_value(classify(d.path()).unwrap()).unwrap();
    assert_eq!(v["rule"], "conventional-dirs");
    let d = fixture(&[("plugin.json", r#"{"name":"n"}"#)]);
    let v = serde_json::to_value(classify(d.path()).unwrap()).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"kind":"claude","manifest":"plugin.json","name":"n","has_hooks":false,"has_mcp":false,"has_bin":false})
    );
}

#[test]
fn entry_paths_join_the_root() {
    let d = fixture(&[("extensions/a.ts", EXT), ("extensions/b.ts", EXT)]);
    let PluginClass::Pi(p) = classify(d.path()).unwrap() else {
        panic!()
    };
    assert_eq!(
        p.entry_paths(Path::new("/run/plugins/x")),
        [
            Path::new("/run/plugins/x/extensions/a.ts"),
            Path::new("/run/plugins/x/extensions/b.ts")
        ]
    );
}
