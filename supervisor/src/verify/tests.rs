//! Unit tests of `verify`.

use super::*;
use crate::manifest::{FileUse, TreeKind};
use std::fs;

fn canonical_tmp() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let real = fs::canonicalize(t.path()).unwrap();
    (t, real)
}

fn manifest() -> Manifest {
    let v = serde_json::json!({
        "version": 1,
        "runtime": "command",
        "agent": {"binary": "/bin/sh"},
        "workdir": "/work",
    });
    Manifest::from_json(v.to_string().as_bytes()).unwrap()
}

/// A plugin tree with two files and a subdirectory, pinned as it is now.
fn pinned_tree(root: &Path, name: &str, role: PinRole) -> TreePin {
    fs::create_dir_all(root.join("lib")).unwrap();
    fs::write(root.join("index.ts"), "export default () => {}\n").unwrap();
    fs::write(root.join("lib/util.ts"), "export const x = 1;\n").unwrap();
    let digest = tree_hash::hash_tree(root, TreeFormat::PiTreeV1).unwrap();
    TreePin {
        name: name.into(),
        path: root.display().to_string(),
        role,
        kind: TreeKind::PiExtension,
        format: TreeFormat::PiTreeV1,
        sha256: digest.sha256,
        files: crate::manifest::FileListing::from_records(&digest.listing.files).unwrap(),
        dirs: digest.listing.dirs,
        stored: None,
        entries: vec!["index.ts".into()],
        env: Default::default(),
        pi_args: Vec::new(),
    }
}

fn pinned_file(path: &Path, bytes: &str, role: PinRole) -> FilePin {
    fs::write(path, bytes).unwrap();
    FilePin {
        path: path.display().to_string(),
        role,
        sha256: tree_hash::sha256_file(path).unwrap().sha256,
        size: None,
        usage: FileUse::Verify,
        env: Default::default(),
        pi_args: Vec::new(),
    }
}

#[test]
fn untouched_trees_and_files_verify() {
    let (_t, dir) = canonical_tmp();
    let mut m = manifest();
    m.trees
        .push(pinned_tree(&dir.join("p"), "p", PinRole::Plugin));
    m.files.push(pinned_file(
        &dir.join("hooks.js"),
        "x",
        PinRole::HookAdapter,
    ));
    let report = verify(&m, "");
    assert_eq!(report.failure(), None, "{report:#?}");
    assert_eq!(report.trees[0].status, CheckStatus::Ok);
    assert_eq!(
        report.trees[0].actual.as_deref(),
        Some(m.trees[0].sha256.as_str())
    );
    assert_eq!(report.files[0].status, CheckStatus::Ok);
    assert_eq!(report.resolved_agent(), Some(Path::new("/bin/sh")));
    let json = serde_json::to_string(&report).unwrap();
    let back: VerifyReport = serde_json::from_str(&json).unwrap();
    assert_eq!(back, report);
}

#[test]
fn drift_names_added_removed_changed_paths_and_empty_dirs() {
    let (_t, dir) = canonical_tmp();
    let root = dir.join("ext");
    let mut m = manifest();
    m.trees.push(pinned_tree(&root, "ext", PinRole::Plugin));
    fs::write(root.join("index.ts"), "process.exit(0)\n").unwrap();
    fs::remove_file(root.join("lib/util.ts")).unwrap();
    fs::write(root.join("evil.ts"), "x").unwrap();
    fs::create_dir(root.join("skills")).unwrap();
    let report = verify(&m, "");
    let tree = &report.trees[0];
    assert_eq!(tree.status, CheckStatus::Drifted);
    let drift = tree.drift.as_ref().unwrap();
    assert_eq!(drift.added, ["evil.ts", "skills/"]);
    assert_eq!(drift.removed, ["lib/util.ts"]);
    assert_eq!(drift.changed, ["index.ts"]);
    let failure = report.failure().unwrap();
    assert_eq!(failure.exit_code, 96);
    assert_eq!(failure.kind, FailureKind::TreeDrifted);
    assert_eq!(
            failure.reason,
            format!(
                "plugin tree \"ext\" ({}) drifted: added [evil.ts, skills/], removed [lib/util.ts], changed [index.ts]",
                root.display()
            )
        );
}

#[test]
fn planted_symlink_or_fifo_is_refused_naming_the_path() {
    let (_t, dir) = canonical_tmp();
    let root = dir.join("ext");
    let mut m = manifest();
    m.trees.push(pinned_tree(&root, "ext", PinRole::Plugin));
    std::os::unix::fs::symlink("/etc/passwd", root.join("lib/link.ts")).unwrap();
    let report = verify(&m, "");
    let tree = &report.trees[0];
    assert_eq!(tree.status, CheckStatus::Refused);
    assert!(
        tree.error.as_deref().unwrap().contains("lib/link.ts"),
        "{tree:?}"
    );
    assert_eq!(report.failure().unwrap().kind, FailureKind::TreeRefused);
    fs::remove_file(root.join("lib/link.ts")).unwrap();

    let fifo = root.join("pipe");
    if std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success())
    {
        let report = verify(&m, "");
        assert_eq!(report.trees[0].status, CheckStatus::Refused);
        assert!(report.trees[0].error.as_deref().unwrap().contains("pipe"));
    }
}

#[test]
fn symlinked_roots_and_ancestors_are_refused_missing_is_missing() {
    let (_t, dir) = canonical_tmp();
    let mut m = manifest();
    let pin = pinned_tree(&dir.join("real"), "p", PinRole::Plugin);
    std::os::unix::fs::symlink(dir.join("real"), dir.join("alias")).unwrap();
    let mut via_link = pin.clone();
    via_link.path = dir.join("alias").display().to_string();
    let mut via_parent = pin.clone();
    via_parent.name = "q".into();
    fs::create_dir(dir.join("parent")).unwrap();
    let inner = pinned_tree(&dir.join("parent/inner"), "q", PinRole::Plugin);
    std::os::unix::fs::symlink(dir.join("parent"), dir.join("plink")).unwrap();
    via_parent.sha256 = inner.sha256;
    via_parent.path = dir.join("plink/inner").display().to_string();
    let mut missing = pin.clone();
    missing.name = "gone".into();
    missing.path = dir.join("gone").display().to_string();
    m.trees = vec![via_link, via_parent, missing];
    m.files.push(FilePin {
        path: dir.join("nofile").display().to_string(),
        role: PinRole::Config,
        sha256: "0".repeat(64),
        size: None,
        usage: FileUse::Verify,
        env: Default::default(),
        pi_args: Vec::new(),
    });
    let report = verify(&m, "");
    assert_eq!(report.trees[0].status, CheckStatus::Refused);
    assert!(report.trees[0]
        .error
        .as_deref()
        .unwrap()
        .contains("symbolic link"));
    assert_eq!(report.trees[1].status, CheckStatus::Refused);
    assert!(report.trees[1]
        .error
        .as_deref()
        .unwrap()
        .contains("resolves through a symlink"));
    assert_eq!(report.trees[2].status, CheckStatus::Missing);
    assert_eq!(report.files[0].status, CheckStatus::Missing);
    // Config (98) outranks plugin (96).
    let f = report.failure().unwrap();
    assert_eq!((f.exit_code, f.kind), (98, FailureKind::FileMissing));
    assert_eq!(
        f.reason,
        format!("config file {} is missing", dir.join("nofile").display())
    );
    assert_eq!(report.failures().len(), 4);
}

#[test]
fn exit_code_priority_is_agent_then_98_to_93_then_manifest_order() {
    let (_t, dir) = canonical_tmp();
    let mut m = manifest();
    let drifted = |name: &str, role: PinRole| {
        let mut t = pinned_tree(&dir.join(name), name, role);
        t.sha256 = "f".repeat(64);
        t
    };
    m.trees.push(drifted("skill", PinRole::Skill));
    m.trees.push(drifted("plugin", PinRole::Plugin));
    m.trees.push(drifted("edit", PinRole::EditRepair));
    let mut hooks = pinned_file(&dir.join("hooks.js"), "x", PinRole::HookAdapter);
    hooks.sha256 = "e".repeat(64);
    m.files.push(hooks);

    let f = verify(&m, "").failure().unwrap();
    assert_eq!((f.exit_code, f.kind), (97, FailureKind::FileDrifted));
    assert!(f.reason.starts_with("hook-adapter file "), "{}", f.reason);
    assert!(f.reason.contains(&format!("expected {}", "e".repeat(64))));

    m.files.clear();
    let f = verify(&m, "").failure().unwrap();
    assert_eq!(f.exit_code, 96);
    assert!(f.reason.starts_with("skill tree \"skill\""), "{}", f.reason);

    m.agent.binary = "definitely-not-a-real-binary".into();
    let report = verify(&m, "/nonexistent-dir");
    let f = report.failure().unwrap();
    assert_eq!((f.exit_code, f.kind), (127, FailureKind::AgentNotFound));
    // Everything was still checked.
    assert_eq!(report.trees.len(), 3);
    assert!(report
        .trees
        .iter()
        .all(|t| t.status == CheckStatus::Drifted));
    assert_eq!(report.resolved_agent(), None);
}

#[test]
fn agent_binary_resolution() {
    let (_t, dir) = canonical_tmp();
    let a = dir.join("a");
    let b = dir.join("b");
    fs::create_dir_all(&a).unwrap();
    fs::create_dir_all(&b).unwrap();
    let write = |p: &Path, mode: u32| {
        fs::write(p, "#!/bin/sh\n").unwrap();
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
    };
    write(&a.join("tool"), 0o644);
    write(&b.join("tool"), 0o755);
    write(&a.join("plain"), 0o600);
    fs::create_dir(a.join("dir")).unwrap();
    let path_var = format!("relative/bin::{}:{}", a.display(), b.display());

    // The first executable regular file wins; a non-executable earlier one is skipped.
    assert_eq!(
        resolve_agent_binary("tool", &path_var).unwrap(),
        b.join("tool")
    );
    // Found only as unusable candidates: 126.
    let e = resolve_agent_binary("plain", &path_var).unwrap_err();
    assert_eq!(
        (e.exit_code, e.kind),
        (126, FailureKind::AgentNotExecutable)
    );
    assert!(
        e.reason.contains("no execute permission bit"),
        "{}",
        e.reason
    );
    let e = resolve_agent_binary("dir", &path_var).unwrap_err();
    assert_eq!(e.exit_code, 126);
    assert!(e.reason.contains("not a regular file"), "{}", e.reason);
    // Not found: 127, naming only the absolute entries searched.
    let e = resolve_agent_binary("nope", &path_var).unwrap_err();
    assert_eq!(e.exit_code, 127);
    assert!(!e.reason.contains("relative/bin"), "{}", e.reason);
    // Relative PATH entries are never searched (cwd of the test is the crate dir).
    assert_eq!(
        resolve_agent_binary("lib.rs", "src").unwrap_err().exit_code,
        127
    );
    // Paths with '/' must be absolute.
    assert_eq!(
        resolve_agent_binary("./tool", &path_var)
            .unwrap_err()
            .exit_code,
        127
    );
    assert_eq!(
        resolve_agent_binary("a/tool", &path_var)
            .unwrap_err()
            .exit_code,
        127
    );
    let abs = b.join("tool").display().to_string();
    assert_eq!(resolve_agent_binary(&abs, "").unwrap(), b.join("tool"));
    let abs_plain = a.join("plain").display().to_string();
    assert_eq!(
        resolve_agent_binary(&abs_plain, "").unwrap_err().exit_code,
        126
    );
    assert_eq!(
        resolve_agent_binary("", &path_var).unwrap_err().exit_code,
        127
    );
    assert_eq!(
        resolve_agent_binary("x\0y", &path_var)
            .unwrap_err()
            .exit_code,
        127
    );
}

#[test]
fn agent_pin_mismatch_is_127() {
    let (_t, dir) = canonical_tmp();
    let bin = dir.join("agent");
    fs::write(&bin, "#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    let mut m = manifest();
    m.agent.binary = "agent".into();
    m.agent.sha256 = Some(tree_hash::sha256_file(&bin).unwrap().sha256);
    let path_var = dir.display().to_string();
    let report = verify(&m, &path_var);
    assert_eq!(report.failure(), None);
    assert_eq!(report.agent.actual_sha256, m.agent.sha256);

    m.agent.sha256 = Some("0".repeat(64));
    let report = verify(&m, &path_var);
    let f = report.failure().unwrap();
    assert_eq!((f.exit_code, f.kind), (127, FailureKind::AgentPinMismatch));
    assert!(
        f.reason.starts_with("agent binary differs from its pin"),
        "{}",
        f.reason
    );
    assert_eq!(
        report.agent.resolved.as_deref(),
        Some(bin.to_str().unwrap())
    );
}

#[test]
fn long_drift_lists_are_summarised_in_the_reason() {
    let list: Vec<String> = (0..13).map(|i| format!("f{i:02}")).collect();
    let s = path_list(&list);
    assert!(s.starts_with("[f00, f01,"), "{s}");
    assert!(s.ends_with("f09, … (+3 more)]"), "{s}");
    assert_eq!(path_list(&[]), "[]");
}
