//! Unit tests of `claude_skills`.

use super::*;

/// [`super::prepare`] with the manifest's own runtime directories.
fn prepare(manifest: &Manifest) -> Result<Vec<String>, String> {
    super::prepare(manifest, &manifest.runtime_dirs())
}
use crate::tree_hash::TreeFormat;
use serde_json::json;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;

/// A canonical temp dir holding `skills/probe` (a skill with what Claude Code would run from a
/// plugin directory) and `work/`.
fn layout() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    let skill = root.join("skills/probe");
    for d in ["hooks", "bin", "scripts"] {
        fs::create_dir_all(skill.join(d)).unwrap();
    }
    fs::create_dir_all(root.join("work")).unwrap();
    fs::write(
        skill.join("SKILL.md"),
        "---\nname: probe\ndescription: Probes\nhooks:\n  PreToolUse: []\n---\nRun !`id`.\n",
    )
    .unwrap();
    fs::write(skill.join("hooks/hooks.json"), "{}").unwrap();
    fs::write(skill.join(".mcp.json"), "{}").unwrap();
    fs::write(skill.join("bin/x"), "#!/bin/sh\n").unwrap();
    fs::write(skill.join("scripts/run.sh"), "echo\n").unwrap();
    (dir, root)
}

/// A Claude Code manifest with the skills tree at `root/skills/probe`, pinned to what it holds
/// now; with its per-file listing when `listing`.
fn manifest(root: &Path, listing: bool) -> Manifest {
    let skill = root.join("skills/probe");
    let digest = tree_hash::hash_tree(&skill, TreeFormat::PiTreeV1).unwrap();
    let mut tree = json!({
        "name": "skill:probe", "path": skill, "role": "skill", "kind": "data",
        "format": "pi-tree-v1", "sha256": digest.sha256,
    });
    if listing {
        tree["files"] = json!(digest.listing.files);
        tree["dirs"] = json!(digest.listing.dirs);
    }
    let v = json!({
        "version": 1, "runtime": "claude", "agent": {"binary": "claude"}, "prompt": "hi",
        "workdir": root.join("work"), "trees": [tree],
    });
    Manifest::from_json(v.to_string().as_bytes()).unwrap()
}

#[test]
fn the_plugin_holds_only_the_derived_skill_md_and_links_to_the_verified_files() {
    let (_dir, root) = layout();
    for listing in [true, false] {
        let m = manifest(&root, listing);
        let base = root.join("skills/.pitcrew-claude-skills");
        // Whatever an earlier launch left is gone.
        fs::create_dir_all(base.join("probe/hooks")).unwrap();
        fs::write(base.join("probe/hooks/hooks.json"), "{}").unwrap();
        let plugins = prepare(&m).unwrap();
        assert_eq!(plugins, [base.join("probe").to_str().unwrap()]);
        let names = |p: &Path| -> Vec<String> {
            let mut v: Vec<String> = fs::read_dir(p)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(&base), ["probe"]);
        assert_eq!(names(&base.join("probe")), ["skills"]);
        let skill = base.join("probe/skills/probe");
        assert_eq!(
            names(&skill),
            [".mcp.json", "SKILL.md", "bin", "hooks", "scripts"]
        );
        let md = fs::symlink_metadata(skill.join("SKILL.md")).unwrap();
        assert!(md.is_file());
        assert_eq!(md.permissions().mode() & 0o7777, 0o644);
        let dir_mode = fs::metadata(&skill).unwrap().permissions().mode() & 0o7777;
        assert_eq!(dir_mode, 0o755);
        assert_eq!(
            fs::read_to_string(skill.join("SKILL.md")).unwrap(),
            "---\nname: \"probe\"\ndescription: \"Probes\"\n---\nRun !\\`id`.\n"
        );
        for entry in [".mcp.json", "bin", "hooks", "scripts"] {
            assert_eq!(
                fs::read_link(skill.join(entry)).unwrap(),
                root.join("skills/probe").join(entry)
            );
        }
    }
}

#[test]
fn a_skill_md_changed_after_verification_is_refused() {
    for listing in [true, false] {
        let (_dir, root) = layout();
        let m = manifest(&root, listing);
        fs::write(
            root.join("skills/probe/SKILL.md"),
            "---\nhooks: {}\n---\nchanged\n",
        )
        .unwrap();
        let err = prepare(&m).unwrap_err();
        assert!(
            err.contains("skill tree \"skill:probe\"")
                && err.contains("changed since it was verified"),
            "{err}"
        );
    }
}

#[test]
fn a_skills_tree_without_a_skill_md_is_refused() {
    let (_dir, root) = layout();
    fs::remove_file(root.join("skills/probe/SKILL.md")).unwrap();
    let err = prepare(&manifest(&root, true)).unwrap_err();
    assert!(err.contains("has no SKILL.md at its root"), "{err}");
}

#[test]
fn a_place_the_agent_may_write_is_refused_and_other_runtimes_get_none() {
    let (_dir, root) = layout();
    let mut m = manifest(&root, true);
    m.workdir = root.join("skills").to_string_lossy().into_owned();
    let err = prepare(&m).unwrap_err();
    assert!(err.contains("which the agent may write"), "{err}");
    let mut m = manifest(&root, true);
    m.runtime = Runtime::Pi;
    assert_eq!(prepare(&m).unwrap(), Vec::<String>::new());
    assert!(!root.join("skills/.pitcrew-claude-skills").exists());
}

#[test]
fn a_skill_named_like_a_verified_plugin_is_refused() {
    let (_dir, root) = layout();
    let plugin = root.join("plugins/probe");
    fs::create_dir_all(plugin.join(".claude-plugin")).unwrap();
    fs::write(
        plugin.join(".claude-plugin/plugin.json"),
        r#"{"name": "other"}"#,
    )
    .unwrap();
    let with_plugin = |path: &Path| {
        let mut v = serde_json::to_value(manifest(&root, true)).unwrap();
        v["trees"].as_array_mut().unwrap().push(json!({
            "name": "probe", "path": path, "role": "plugin", "kind": "claude-plugin",
            "format": "pi-tree-v1", "sha256": "0".repeat(64),
        }));
        Manifest::from_json(v.to_string().as_bytes()).unwrap()
    };
    // Named by its directory.
    let err = prepare(&with_plugin(&plugin)).unwrap_err();
    assert!(err.contains("named like the verified plugin"), "{err}");
    // Named by its plugin.json.
    let renamed = root.join("plugins/renamed");
    fs::create_dir_all(renamed.join(".claude-plugin")).unwrap();
    fs::write(
        renamed.join(".claude-plugin/plugin.json"),
        r#"{"name": "probe"}"#,
    )
    .unwrap();
    let err = prepare(&with_plugin(&renamed)).unwrap_err();
    assert!(err.contains("named like the verified plugin"), "{err}");
    // Another name: the skill's plugin is made.
    fs::write(
        renamed.join(".claude-plugin/plugin.json"),
        r#"{"name": "renamed"}"#,
    )
    .unwrap();
    assert!(prepare(&with_plugin(&renamed)).is_ok());
}
