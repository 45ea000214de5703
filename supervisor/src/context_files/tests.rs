use super::*;

/// [`super::prepare`] with the manifest's own runtime directories.
fn prepare(
    manifest: &Manifest,
    version: Option<&str>,
    iteration: u32,
    kept: Option<&mut Option<Baseline>>,
) -> Result<Option<Prepared>, ContextError> {
    super::prepare(manifest, &manifest.runtime_dirs(), version, iteration, kept)
}
use serde_json::json;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;

/// A workspace `ws` with its default config dir (`pi-config` or `claude-config`) beside it.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new(runtime: &str) -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("ws")).unwrap();
        fs::create_dir(dir.path().join(format!("{runtime}-config"))).unwrap();
        Sandbox { dir }
    }

    fn ws(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    fn manifest(&self, runtime: &str, context: serde_json::Value) -> Manifest {
        let v = json!({
            "version": 1, "runtime": runtime,
            "agent": {"binary": runtime, "context_files": context},
            "prompt": "hi", "workdir": self.ws(),
        });
        Manifest::from_json(v.to_string().as_bytes()).unwrap()
    }

    /// The record's entries below the sandbox (a machine's own `/AGENTS.md` aside).
    fn ours(&self, read: &[ContextFileRecord]) -> Vec<(String, String)> {
        let root = self.dir.path().display().to_string();
        read.iter()
            .filter(|r| r.path.starts_with(&root))
            .map(|r| (r.path[root.len()..].to_string(), r.scope.clone()))
            .collect()
    }
}

fn sha(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

#[test]
fn each_release_reads_its_own_names_in_its_own_order() {
    assert_eq!(names(Runtime::Pi, Some("0.73.1")), PI_NAMES);
    assert_eq!(names(Runtime::Pi, Some("0.87.1"))[0], "AGENTS.override.md");
    assert_eq!(names(Runtime::Pi, Some("1.6.0")), PI_OVERRIDE_NAMES);
    // An unknown release may read any of them.
    assert_eq!(names(Runtime::Pi, None), PI_OVERRIDE_NAMES);
    assert_eq!(names(Runtime::Claude, None), ["CLAUDE.md"]);
    assert!(names(Runtime::Command, None).is_empty());
}

#[test]
fn as_is_names_what_pi_reads_first_in_each_directory_with_its_digest() {
    let sb = Sandbox::new("pi");
    let ws = sb.ws();
    fs::write(ws.join("CLAUDE.md"), "claude\n").unwrap();
    fs::write(ws.join("AGENTS.md"), "agents\n").unwrap();
    fs::write(sb.dir.path().join("pi-config/AGENTS.md"), "global\n").unwrap();
    // A directory by the first name is passed over; a file of the parent directory is read.
    fs::create_dir(ws.join("AGENTS.override.md")).unwrap();
    fs::write(sb.dir.path().join("CLAUDE.MD"), "parent\n").unwrap();
    let m = sb.manifest("pi", json!("as-is"));
    let p = prepare(&m, Some("1.6.0"), 1, None).unwrap().unwrap();
    assert_eq!(p.record.mode, "as-is");
    assert_eq!(
        sb.ours(&p.record.read),
        [
            ("/pi-config/AGENTS.md".to_string(), "config".to_string()),
            ("/CLAUDE.MD".to_string(), "parent".to_string()),
            ("/ws/AGENTS.md".to_string(), "workdir".to_string()),
        ]
    );
    let workdir = p.record.read.last().unwrap();
    assert_eq!(workdir.sha256.as_deref(), Some(sha("agents\n").as_str()));
    assert_eq!(workdir.bytes, Some(7));
    assert!(p.record.reset.is_empty() && p.record.baseline_iteration.is_none());
    assert_eq!(p.claude_md, None);

    // A symlink pi reads through is named with its target and the digest of what it leads to;
    // pi 0.73 knows no override.
    fs::remove_dir(ws.join("AGENTS.override.md")).unwrap();
    fs::write(ws.join("AGENTS.override.md"), "override\n").unwrap();
    fs::remove_file(ws.join("AGENTS.md")).unwrap();
    fs::write(sb.dir.path().join("linked.md"), "linked\n").unwrap();
    std::os::unix::fs::symlink("../linked.md", ws.join("AGENTS.md")).unwrap();
    let p = prepare(&m, Some("0.73.1"), 1, None).unwrap().unwrap();
    let workdir = p.record.read.last().unwrap();
    assert_eq!(workdir.path, ws.join("AGENTS.md").display().to_string());
    assert_eq!(workdir.link.as_deref(), Some("../linked.md"));
    assert_eq!(workdir.sha256.as_deref(), Some(sha("linked\n").as_str()));
    assert_eq!(workdir.bytes, Some(7));
    // One pi passes over (dangling, a file the agent may not read, a directory) is not named:
    // the next name pi reads is.
    for target in ["gone.md", "../secret.md", "/"] {
        fs::write(sb.dir.path().join("secret.md"), "secret\n").unwrap();
        fs::set_permissions(
            sb.dir.path().join("secret.md"),
            fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        fs::remove_file(ws.join("AGENTS.md")).unwrap();
        std::os::unix::fs::symlink(target, ws.join("AGENTS.md")).unwrap();
        let p = prepare(&m, Some("0.73.1"), 1, None).unwrap().unwrap();
        let workdir = p.record.read.last().unwrap();
        assert!(
            workdir.path.ends_with("/ws/CLAUDE.md"),
            "{target}: {workdir:?}"
        );
        assert_eq!(workdir.sha256.as_deref(), Some(sha("claude\n").as_str()));
    }
    let p = prepare(&m, Some("0.87.1"), 1, None).unwrap().unwrap();
    let workdir = p.record.read.last().unwrap();
    assert!(
        workdir.path.ends_with("/ws/AGENTS.override.md"),
        "{workdir:?}"
    );
}

#[test]
fn none_names_nothing_and_command_has_no_record() {
    let sb = Sandbox::new("pi");
    fs::write(sb.ws().join("AGENTS.md"), "agents\n").unwrap();
    let p = prepare(&sb.manifest("pi", json!(false)), None, 1, None)
        .unwrap()
        .unwrap();
    assert_eq!(p.record.mode, "none");
    assert!(p.record.read.is_empty());
    let mut m = sb.manifest("pi", json!(true));
    m.runtime = Runtime::Command;
    assert_eq!(prepare(&m, None, 1, None).unwrap(), None);
}

#[test]
fn uploaded_sets_back_what_the_agent_changed_created_or_replaced() {
    let sb = Sandbox::new("pi");
    let ws = sb.ws();
    fs::write(ws.join("AGENTS.md"), "repo agents\n").unwrap();
    fs::set_permissions(ws.join("AGENTS.md"), fs::Permissions::from_mode(0o640)).unwrap();
    fs::write(ws.join("CLAUDE.md"), "repo claude\n").unwrap();
    let m = sb.manifest("pi", json!("uploaded"));
    let mut kept = None;
    // The first iteration takes the baseline: nothing to set back yet.
    let p = prepare(&m, Some("1.6.0"), 1, Some(&mut kept))
        .unwrap()
        .unwrap();
    assert_eq!(p.record.baseline_iteration, Some(1));
    assert!(p.record.reset.is_empty());
    let base_sha = sha("repo agents\n");
    assert_eq!(
        p.record.read.last().unwrap().sha256.as_deref(),
        Some(base_sha.as_str())
    );

    // What an agent does to them.
    fs::write(ws.join("AGENTS.md"), "planted\n").unwrap();
    fs::write(ws.join("AGENTS.override.md"), "planted override\n").unwrap();
    fs::remove_file(ws.join("CLAUDE.md")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", ws.join("CLAUDE.md")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        ws.join("AGENTS.MD"),
        FileType::Fifo,
        Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    fs::create_dir(ws.join("CLAUDE.MD")).unwrap();

    let p = prepare(&m, Some("1.6.0"), 2, Some(&mut kept))
        .unwrap()
        .unwrap();
    assert_eq!(p.record.baseline_iteration, Some(1));
    let done: Vec<(String, &str, &str)> = p
        .record
        .reset
        .iter()
        .map(|r| {
            let name = Path::new(&r.path).file_name().unwrap();
            (
                name.to_string_lossy().into_owned(),
                r.action.as_str(),
                r.was.as_str(),
            )
        })
        .collect();
    assert_eq!(
        done,
        [
            ("AGENTS.override.md".into(), "removed", "regular file"),
            ("AGENTS.md".into(), "restored", "regular file"),
            ("AGENTS.MD".into(), "removed", "fifo"),
            ("CLAUDE.md".into(), "restored", "symlink"),
        ]
    );
    assert_eq!(
        fs::read_to_string(ws.join("AGENTS.md")).unwrap(),
        "repo agents\n"
    );
    let mode = fs::metadata(ws.join("AGENTS.md"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o640);
    assert_eq!(
        fs::read_to_string(ws.join("CLAUDE.md")).unwrap(),
        "repo claude\n"
    );
    assert!(!ws.join("AGENTS.override.md").exists());
    assert!(fs::symlink_metadata(ws.join("AGENTS.MD")).is_err());
    // No release reads a directory: it is left alone.
    assert!(ws.join("CLAUDE.MD").is_dir());
    assert_eq!(
        p.record.read.last().unwrap().sha256.as_deref(),
        Some(base_sha.as_str())
    );

    // Set back, there is nothing more to do; a removed file or a changed mode is restored.
    let p = prepare(&m, Some("1.6.0"), 3, Some(&mut kept))
        .unwrap()
        .unwrap();
    assert!(p.record.reset.is_empty(), "{:?}", p.record.reset);
    fs::remove_file(ws.join("AGENTS.md")).unwrap();
    fs::set_permissions(ws.join("CLAUDE.md"), fs::Permissions::from_mode(0o600)).unwrap();
    let p = prepare(&m, Some("1.6.0"), 4, Some(&mut kept))
        .unwrap()
        .unwrap();
    let was: Vec<&str> = p.record.reset.iter().map(|r| r.was.as_str()).collect();
    assert_eq!(was, ["missing", "regular file"]);
    assert!(ws.join("AGENTS.md").is_file());

    // Another manifest (another runtime here) takes a baseline of its own.
    let claude = sb.manifest("claude", json!("uploaded"));
    fs::create_dir(sb.dir.path().join("claude-config")).unwrap();
    fs::write(ws.join("CLAUDE.md"), "changed before the claude run\n").unwrap();
    let p = prepare(&claude, None, 5, Some(&mut kept)).unwrap().unwrap();
    assert_eq!(p.record.baseline_iteration, Some(5));
    assert!(p.record.reset.is_empty());
}

#[test]
fn a_caller_that_keeps_no_baseline_takes_one_per_iteration() {
    let sb = Sandbox::new("pi");
    fs::write(sb.ws().join("AGENTS.md"), "planted earlier\n").unwrap();
    let m = sb.manifest("pi", json!("uploaded"));
    let p = prepare(&m, Some("1.6.0"), 7, None).unwrap().unwrap();
    assert_eq!(p.record.baseline_iteration, Some(7));
    assert!(p.record.reset.is_empty());
    assert!(sb.ws().join("AGENTS.md").exists());
}

#[test]
fn a_changed_file_too_large_to_write_back_stops_the_iteration_and_is_left_alone() {
    let sb = Sandbox::new("pi");
    let big = "x".repeat(MAX_KEPT_BYTES as usize + 1);
    fs::write(sb.ws().join("AGENTS.md"), &big).unwrap();
    let m = sb.manifest("pi", json!("uploaded"));
    let mut kept = None;
    prepare(&m, Some("1.6.0"), 1, Some(&mut kept)).unwrap();
    // Unchanged, it is fine.
    prepare(&m, Some("1.6.0"), 2, Some(&mut kept)).unwrap();
    fs::write(sb.ws().join("AGENTS.md"), "planted\n").unwrap();
    let err = prepare(&m, Some("1.6.0"), 3, Some(&mut kept)).unwrap_err();
    assert!(matches!(err, ContextError::TooLarge { .. }), "{err}");
    assert!(err.to_string().contains("AGENTS.md"), "{err}");
    assert_eq!(
        fs::read_to_string(sb.ws().join("AGENTS.md")).unwrap(),
        "planted\n"
    );
}

#[test]
fn claude_is_given_the_workdirs_claude_md_when_it_is_a_regular_file() {
    let sb = Sandbox::new("claude");
    let ws = sb.ws();
    let config = sb.dir.path().join("claude-config");
    fs::write(config.join("CLAUDE.md"), "user\n").unwrap();
    fs::create_dir_all(config.join("rules/deep")).unwrap();
    fs::write(config.join("rules/deep/b.md"), "b\n").unwrap();
    fs::write(config.join("rules/a.md"), "a\n").unwrap();
    fs::write(config.join("rules/notes.txt"), "not a rule\n").unwrap();
    fs::write(ws.join("CLAUDE.md"), "repo\n").unwrap();
    // Claude Code reads no AGENTS.md.
    fs::write(ws.join("AGENTS.md"), "agents\n").unwrap();
    let m = sb.manifest("claude", json!("as-is"));
    let p = prepare(&m, Some("2.1.332"), 1, None).unwrap().unwrap();
    assert_eq!(
        sb.ours(&p.record.read),
        [
            ("/claude-config/CLAUDE.md".to_string(), "config".to_string()),
            (
                "/claude-config/rules/a.md".to_string(),
                "config".to_string()
            ),
            (
                "/claude-config/rules/deep/b.md".to_string(),
                "config".to_string()
            ),
            ("/ws/CLAUDE.md".to_string(), "workdir".to_string()),
        ]
    );
    assert_eq!(
        p.claude_md,
        Some(ws.join("CLAUDE.md").display().to_string())
    );
    // A symlink is not given (Claude Code would follow it).
    fs::remove_file(ws.join("CLAUDE.md")).unwrap();
    std::os::unix::fs::symlink("AGENTS.md", ws.join("CLAUDE.md")).unwrap();
    let p = prepare(&m, Some("2.1.332"), 1, None).unwrap().unwrap();
    assert_eq!(p.claude_md, None);
    assert!(!p.record.read.iter().any(|r| r.scope == "workdir"));
    // None: nothing given, nothing named.
    let p = prepare(&sb.manifest("claude", json!("none")), None, 1, None)
        .unwrap()
        .unwrap();
    assert_eq!((p.claude_md, p.record.read.len()), (None, 0));
}

/// The names and actions of a record's resets, relative to the workspace.
fn resets(ws: &Path, p: &Prepared) -> Vec<(String, String, String)> {
    p.record
        .reset
        .iter()
        .map(|r| {
            let rel = Path::new(&r.path).strip_prefix(ws).unwrap();
            (rel.display().to_string(), r.action.clone(), r.was.clone())
        })
        .collect()
}

#[test]
fn uploaded_sets_back_the_pi_project_files_pi_0_73_reads_whatever_the_flags() {
    let sb = Sandbox::new("pi");
    let ws = sb.ws();
    fs::create_dir(ws.join(".pi")).unwrap();
    fs::set_permissions(ws.join(".pi"), fs::Permissions::from_mode(0o750)).unwrap();
    fs::write(ws.join(".pi/SYSTEM.md"), "repo system\n").unwrap();
    let m = sb.manifest("pi", json!("uploaded"));
    let mut kept = None;
    let p = prepare(&m, Some("0.73.1"), 1, Some(&mut kept))
        .unwrap()
        .unwrap();
    // The system prompt pi reads is named with its digest.
    let named: Vec<_> = p
        .record
        .read
        .iter()
        .filter(|r| r.path.ends_with("/.pi/SYSTEM.md"))
        .map(|r| r.sha256.clone())
        .collect();
    assert_eq!(named, [Some(sha("repo system\n"))]);

    // What an agent writes there is set back.
    fs::write(ws.join(".pi/SYSTEM.md"), "planted system\n").unwrap();
    fs::write(ws.join(".pi/APPEND_SYSTEM.md"), "planted append\n").unwrap();
    fs::write(
        ws.join(".pi/settings.json"),
        "{\"shellCommandPrefix\": \"x\"}",
    )
    .unwrap();
    let p = prepare(&m, Some("0.73.1"), 2, Some(&mut kept))
        .unwrap()
        .unwrap();
    let r = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
    assert_eq!(
        resets(&ws, &p),
        [
            r(".pi/SYSTEM.md", "restored", "regular file"),
            r(".pi/APPEND_SYSTEM.md", "removed", "regular file"),
            r(".pi/settings.json", "removed", "regular file"),
        ]
    );
    assert_eq!(
        fs::read_to_string(ws.join(".pi/SYSTEM.md")).unwrap(),
        "repo system\n"
    );

    // A `.pi` made a symlink to the agent's own directory: removed, the directory made again
    // with its mode, its file written back.
    fs::create_dir(ws.join("elsewhere")).unwrap();
    fs::write(ws.join("elsewhere/SYSTEM.md"), "planted system\n").unwrap();
    fs::remove_dir_all(ws.join(".pi")).unwrap();
    std::os::unix::fs::symlink("elsewhere", ws.join(".pi")).unwrap();
    let p = prepare(&m, Some("0.73.1"), 3, Some(&mut kept))
        .unwrap()
        .unwrap();
    assert_eq!(
        resets(&ws, &p),
        [
            r(".pi", "restored", "symlink"),
            r(".pi/SYSTEM.md", "restored", "missing"),
        ]
    );
    let meta = fs::symlink_metadata(ws.join(".pi")).unwrap();
    assert!(meta.is_dir());
    assert_eq!(meta.permissions().mode() & 0o7777, 0o750);
    assert_eq!(
        fs::read_to_string(ws.join(".pi/SYSTEM.md")).unwrap(),
        "repo system\n"
    );
    assert_eq!(
        fs::read_to_string(ws.join("elsewhere/SYSTEM.md")).unwrap(),
        "planted system\n"
    );

    // Releases with project trust (`--no-approve`) read none of it: left alone.
    fs::write(ws.join(".pi/APPEND_SYSTEM.md"), "planted append\n").unwrap();
    let m2 = sb.manifest("pi", json!("uploaded"));
    let mut kept2 = None;
    prepare(&m2, Some("1.6.0"), 1, Some(&mut kept2)).unwrap();
    let p = prepare(&m2, Some("1.6.0"), 2, Some(&mut kept2))
        .unwrap()
        .unwrap();
    assert!(p.record.reset.is_empty());
    assert!(!p.record.read.iter().any(|r| r.path.contains("/.pi/")));
}

#[test]
fn a_pi_dir_that_is_a_symlink_when_the_baseline_is_taken_stops_the_iteration() {
    let sb = Sandbox::new("pi");
    let ws = sb.ws();
    fs::create_dir(ws.join("elsewhere")).unwrap();
    std::os::unix::fs::symlink("elsewhere", ws.join(".pi")).unwrap();
    let m = sb.manifest("pi", json!("uploaded"));
    let err = prepare(&m, Some("0.73.1"), 1, Some(&mut None)).unwrap_err();
    assert!(err.to_string().contains(".pi is a symlink"), "{err}");
    // Where no baseline is wanted (as-is) it is named as the link it is.
    let m = sb.manifest("pi", json!("as-is"));
    let p = prepare(&m, Some("0.73.1"), 1, None).unwrap().unwrap();
    let link: Vec<_> = p
        .record
        .read
        .iter()
        .filter(|r| r.path.ends_with("/.pi"))
        .map(|r| r.link.clone())
        .collect();
    assert_eq!(link, [Some("elsewhere".to_string())]);
}

#[test]
fn uploaded_stops_when_a_baseline_symlink_leads_to_changed_content() {
    // A workspace the run did not upload may hold a context file that is a symlink to another
    // file of the repository (`AGENTS.md -> docs/rules.md`), which is no context file by name.
    let sb = Sandbox::new("pi");
    let ws = sb.ws();
    fs::create_dir(ws.join("docs")).unwrap();
    fs::write(ws.join("docs/rules.md"), "repo rules\n").unwrap();
    std::os::unix::fs::symlink("docs/rules.md", ws.join("AGENTS.md")).unwrap();
    let m = sb.manifest("pi", json!("uploaded"));
    let mut kept = None;
    let p = prepare(&m, Some("1.6.0"), 1, Some(&mut kept))
        .unwrap()
        .unwrap();
    let workdir = p.record.read.last().unwrap();
    assert_eq!(
        workdir.sha256.as_deref(),
        Some(sha("repo rules\n").as_str())
    );
    // Unchanged: nothing to do.
    let p = prepare(&m, Some("1.6.0"), 2, Some(&mut kept))
        .unwrap()
        .unwrap();
    assert!(p.record.reset.is_empty());
    // The agent writes the link's target: the iteration stops rather than launch with it.
    fs::write(ws.join("docs/rules.md"), "planted\n").unwrap();
    let err = prepare(&m, Some("1.6.0"), 3, Some(&mut kept)).unwrap_err();
    assert!(
        matches!(err, ContextError::ChangedThroughLink { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("/ws/AGENTS.md is a symlink"),
        "{err}"
    );
    assert_eq!(
        fs::read_to_string(ws.join("docs/rules.md")).unwrap(),
        "planted\n"
    );
}

#[test]
fn none_sets_back_pi_0_73s_project_prompts_and_leaves_the_context_files() {
    let sb = Sandbox::new("pi");
    let ws = sb.ws();
    fs::write(ws.join("AGENTS.md"), "agents\n").unwrap();
    let m = sb.manifest("pi", json!("none"));
    let mut kept = None;
    let p = prepare(&m, Some("0.73.1"), 1, Some(&mut kept))
        .unwrap()
        .unwrap();
    assert_eq!(p.record.baseline_iteration, Some(1));
    assert!(p.record.read.is_empty());
    fs::write(ws.join("AGENTS.md"), "the task's edit\n").unwrap();
    fs::create_dir(ws.join(".pi")).unwrap();
    fs::write(ws.join(".pi/SYSTEM.md"), "planted\n").unwrap();
    let p = prepare(&m, Some("0.73.1"), 2, Some(&mut kept))
        .unwrap()
        .unwrap();
    assert_eq!(
        resets(&ws, &p),
        [(
            ".pi/SYSTEM.md".to_string(),
            "removed".to_string(),
            "regular file".to_string()
        )]
    );
    assert!(p.record.read.is_empty());
    // pi reads no context file under `none`: the task's edit stays.
    assert_eq!(
        fs::read_to_string(ws.join("AGENTS.md")).unwrap(),
        "the task's edit\n"
    );
    // Releases with project trust read none of it: `none` names and sets back nothing.
    let p = prepare(&m, Some("1.6.0"), 3, None).unwrap().unwrap();
    assert_eq!(p.record.baseline_iteration, None);
}

#[test]
fn codex_reads_the_override_first_and_under_none_only_its_config_dir() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    fs::create_dir(&ws).unwrap();
    fs::create_dir(dir.path().join("codex-home")).unwrap();
    fs::write(dir.path().join("codex-home/AGENTS.md"), "global\n").unwrap();
    fs::write(ws.join("AGENTS.md"), "agents\n").unwrap();
    fs::write(ws.join("AGENTS.override.md"), "override\n").unwrap();
    // Codex never reads a CLAUDE.md, nor the workdir's parents.
    fs::write(ws.join("CLAUDE.md"), "claude\n").unwrap();
    fs::write(dir.path().join("AGENTS.md"), "parent\n").unwrap();
    let manifest = |context: &str| {
        let v = json!({
            "version": 1, "runtime": "codex",
            "agent": {"binary": "codex", "context_files": context},
            "prompt": "hi", "workdir": ws,
        });
        Manifest::from_json(v.to_string().as_bytes()).unwrap()
    };
    let named = |p: &Prepared| -> Vec<(String, String)> {
        let root = dir.path().display().to_string();
        p.record
            .read
            .iter()
            .map(|r| (r.path[root.len()..].to_string(), r.scope.clone()))
            .collect()
    };
    let p = prepare(&manifest("as-is"), Some("0.169.1"), 1, None)
        .unwrap()
        .unwrap();
    assert_eq!(
        named(&p),
        [
            ("/codex-home/AGENTS.md".to_string(), "config".to_string()),
            ("/ws/AGENTS.override.md".to_string(), "workdir".to_string()),
        ]
    );
    let p = prepare(&manifest("none"), Some("0.169.1"), 1, None)
        .unwrap()
        .unwrap();
    assert_eq!(
        named(&p),
        [("/codex-home/AGENTS.md".to_string(), "config".to_string())]
    );
    assert_eq!(
        names(Runtime::Codex, None),
        ["AGENTS.override.md", "AGENTS.md"]
    );
}
