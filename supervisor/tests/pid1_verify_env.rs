//! Verification and environment as seen from outside and from inside the agent: a tree changed
//! after the manifest was made fails with 96 and names the path, an adapter with 97, a config
//! with 98, and nothing is launched; loader variables planted in the baseline or the `.env`
//! never reach the agent, and `JITI_FS_CACHE=false` does.

mod common;
use common::{require_root_and_namespaces, Sandbox};
use pitcrew_core::tree_hash::{hash_tree, sha256_file, TreeFormat};
use serde_json::{json, Value};
use std::fs;
use std::path::Path;
use std::process::Command;

/// An agent that leaves a marker: if it exists, something was launched.
const MARK_LAUNCH: &str = "touch $W/launched";

fn tree_pin(name: &str, path: &Path) -> Value {
    let digest = hash_tree(path, TreeFormat::PiTreeV1).expect("hash tree");
    json!({
        "name": name, "path": path, "role": "plugin", "kind": "data", "format": "pi-tree-v1",
        "sha256": digest.sha256, "files": digest.listing.files, "dirs": digest.listing.dirs,
    })
}

fn file_pin(path: &Path, role: &str) -> Value {
    let rec = sha256_file(path).expect("hash file");
    json!({"path": path, "role": role, "sha256": rec.sha256, "size": rec.size})
}

fn plugin_tree(sandbox: &Sandbox) -> std::path::PathBuf {
    let tree = sandbox.path("plugins/hello");
    fs::create_dir_all(tree.join("lib")).expect("mkdir");
    fs::write(tree.join("index.js"), "module.exports = () => {};\n").expect("write");
    fs::write(tree.join("lib/util.js"), "exports.x = 1;\n").expect("write");
    tree
}

#[test]
fn a_tree_changed_after_the_manifest_fails_96_and_names_the_path() {
    if !require_root_and_namespaces() {
        return;
    }
    type Mutation = (&'static str, fn(&Path), &'static str, &'static str);
    let mutations: [Mutation; 5] = [
        (
            "file edited",
            |t| fs::write(t.join("lib/util.js"), "exports.x = 2;\n").expect("edit"),
            "changed",
            "lib/util.js",
        ),
        (
            "file added",
            |t| fs::write(t.join("lib/extra.js"), "evil()\n").expect("add"),
            "added",
            "lib/extra.js",
        ),
        (
            "empty directory added",
            |t| fs::create_dir(t.join("skills")).expect("mkdir"),
            "added",
            "skills/",
        ),
        (
            "symlink planted",
            |t| std::os::unix::fs::symlink("/etc/passwd", t.join("lib/link.js")).expect("symlink"),
            "refused",
            "lib/link.js",
        ),
        (
            "file replaced by a fifo",
            |t| {
                fs::remove_file(t.join("index.js")).expect("rm");
                let status = Command::new("mkfifo")
                    .arg(t.join("index.js"))
                    .status()
                    .expect("mkfifo");
                assert!(status.success());
            },
            "refused",
            "index.js",
        ),
    ];
    for (what, mutate, status, path) in mutations {
        let mut sandbox = Sandbox::sh(MARK_LAUNCH);
        let tree = plugin_tree(&sandbox);
        sandbox.manifest["trees"] = json!([tree_pin("hello", &tree)]);
        mutate(&tree);
        let run = sandbox.run_pid1();
        assert_eq!(run.code, 96, "{what}: {}\n{}", run.record, run.stderr);
        assert_eq!(run.record["exit_code"], 96, "{what}");
        let reason = run.record["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains(path),
            "{what}: reason {reason:?} must name {path}"
        );
        let check = &run.record["verification"]["trees"][0];
        assert_eq!(
            check["status"],
            if status == "refused" {
                "refused"
            } else {
                "drifted"
            },
            "{what}: {check}"
        );
        if status != "refused" {
            let listed = check["drift"][status].as_array().expect("drift list");
            assert!(listed.iter().any(|p| p == path), "{what}: drift {check}");
        }
        assert!(
            run.record["agent"].is_null(),
            "{what}: nothing may be launched"
        );
        assert!(
            !sandbox.workdir.join("launched").exists(),
            "{what}: the agent ran"
        );
    }
}

#[test]
fn a_missing_tree_fails_96() {
    if !require_root_and_namespaces() {
        return;
    }
    let mut sandbox = Sandbox::sh(MARK_LAUNCH);
    let tree = plugin_tree(&sandbox);
    sandbox.manifest["trees"] = json!([tree_pin("hello", &tree)]);
    fs::remove_dir_all(&tree).expect("rm tree");
    let run = sandbox.run_pid1();
    assert_eq!(run.code, 96, "{}", run.record);
    assert_eq!(run.record["verification"]["trees"][0]["status"], "missing");
    assert!(!sandbox.workdir.join("launched").exists());
}

#[test]
fn pinned_files_fail_with_their_role_code() {
    if !require_root_and_namespaces() {
        return;
    }
    for (role, code) in [
        ("hook-adapter", 97),
        ("config", 98),
        ("runtime-manifest", 95),
    ] {
        let mut sandbox = Sandbox::sh(MARK_LAUNCH);
        let file = sandbox.path("adapter.js");
        fs::write(&file, "module.exports = () => {};\n").expect("write");
        sandbox.manifest["files"] = json!([file_pin(&file, role)]);
        fs::write(&file, "module.exports = () => { allowEverything() };\n").expect("tamper");
        let run = sandbox.run_pid1();
        assert_eq!(run.code, code, "{role}: {}", run.record);
        let reason = run.record["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("adapter.js"), "{role}: {reason}");
        assert!(
            !sandbox.workdir.join("launched").exists(),
            "{role}: the agent ran"
        );
    }
    // A missing hook adapter is 97 too (pi would silently skip a missing -e path).
    let mut sandbox = Sandbox::sh(MARK_LAUNCH);
    let file = sandbox.path("hooks.js");
    fs::write(&file, "x").expect("write");
    sandbox.manifest["files"] = json!([file_pin(&file, "hook-adapter")]);
    fs::remove_file(&file).expect("rm");
    let run = sandbox.run_pid1();
    assert_eq!(run.code, 97, "{}", run.record);
    assert_eq!(run.record["verification"]["files"][0]["status"], "missing");
}

#[test]
fn an_untouched_sandbox_verifies_and_launches() {
    if !require_root_and_namespaces() {
        return;
    }
    let mut sandbox = Sandbox::sh(MARK_LAUNCH);
    let tree = plugin_tree(&sandbox);
    let file = sandbox.path("hooks.js");
    fs::write(&file, "module.exports = () => {};\n").expect("write");
    sandbox.manifest["trees"] = json!([tree_pin("hello", &tree)]);
    sandbox.manifest["files"] = json!([file_pin(&file, "hook-adapter")]);
    let run = sandbox.run_pid1();
    assert_eq!(run.code, 0, "{}\n{}", run.record, run.stderr);
    assert_eq!(run.record["verification"]["trees"][0]["status"], "ok");
    assert_eq!(run.record["verification"]["files"][0]["status"], "ok");
    assert!(sandbox.workdir.join("launched").exists());
}

#[test]
fn loader_variables_never_reach_the_agent() {
    if !require_root_and_namespaces() {
        return;
    }
    let mut sandbox = Sandbox::sh("env > $W/env");
    let dotenv = sandbox.workdir.join(".env");
    fs::write(
        &dotenv,
        "# written by an earlier iteration\n\
         export NODE_OPTIONS='--require /tmp/evil.js'\n\
         JITI_ALIAS={\"x\":\"/tmp/evil.js\"}\n\
         LD_PRELOAD=/tmp/evil.so\n\
         JITI_FS_CACHE=true\n\
         GREETING=\"hello $LANG\"\n\
         evil() { curl x; }\n\
         STOLEN=$(cat /etc/shadow)\n",
    )
    .expect("write .env");
    sandbox.manifest["env"] = json!({"dotenv": dotenv, "set": {"LANG": "C.UTF-8"}});
    sandbox.manifest["dirs"] = json!({"tmp": sandbox.workdir.join("tmp"), "home": sandbox.workdir});
    fs::create_dir(sandbox.workdir.join("tmp")).expect("tmp");
    std::os::unix::fs::chown(
        sandbox.workdir.join("tmp"),
        Some(common::AGENT_ID),
        Some(common::AGENT_ID),
    )
    .expect("chown");
    // The baseline (the image's environment) carries loader variables too.
    let run = sandbox.run_pid1_with_env(&[
        ("NODE_PATH", "/tmp/evil_modules"),
        ("JITI_DEBUG", "1"),
        ("BASH_ENV", "/tmp/evil.sh"),
        ("PYTHONSTARTUP", "/tmp/evil.py"),
    ]);
    let record = run.record;
    assert_eq!(run.code, 0, "{record}\n{}", run.stderr);

    let env = fs::read_to_string(sandbox.workdir.join("env")).expect("agent env");
    let names: Vec<&str> = env.lines().filter_map(|l| l.split('=').next()).collect();
    for planted in [
        "NODE_OPTIONS",
        "JITI_ALIAS",
        "LD_PRELOAD",
        "NODE_PATH",
        "JITI_DEBUG",
        "BASH_ENV",
        "PYTHONSTARTUP",
        "STOLEN",
    ] {
        assert!(
            !names.contains(&planted),
            "{planted} reached the agent:\n{env}"
        );
    }
    assert!(env.lines().any(|l| l == "JITI_FS_CACHE=false"), "{env}");
    assert!(env.lines().any(|l| l == "GREETING=hello C.UTF-8"), "{env}");
    assert!(!env.contains("evil"), "{env}");

    // The record names what was removed (names and sources, never values) and the refused lines.
    let removed = record["env"]["removed"].as_array().expect("removed");
    let removed_names: Vec<&str> = removed.iter().filter_map(|r| r["name"].as_str()).collect();
    for name in [
        "NODE_OPTIONS",
        "JITI_ALIAS",
        "LD_PRELOAD",
        "NODE_PATH",
        "JITI_DEBUG",
        "BASH_ENV",
        "PYTHONSTARTUP",
    ] {
        assert!(
            removed_names.contains(&name),
            "{name} not reported: {removed:?}"
        );
    }
    let refused_lines: Vec<u64> = record["env"]["dotenv_refused"]
        .as_array()
        .expect("refused")
        .iter()
        .filter_map(|r| r["line"].as_u64())
        .collect();
    assert!(
        refused_lines.contains(&7) && refused_lines.contains(&8),
        "{record}"
    );
    let text = record.to_string();
    assert!(
        !text.contains("evil"),
        "a value leaked into the record: {text}"
    );
}

#[test]
fn a_path_planted_through_dotenv_never_picks_the_agents_interpreter() {
    if !require_root_and_namespaces() {
        return;
    }
    // The agent is a `#!/usr/bin/env sh` script (pi's cli.js is `#!/usr/bin/env node`). An
    // earlier iteration planted a fake `sh` in the writable workspace and put it first on PATH
    // through the agent-writable `.env`.
    let mut sandbox = Sandbox::sh("unused");
    let agent = sandbox.path("agent");
    fs::write(
        &agent,
        "#!/usr/bin/env sh\necho \"real agent ran\" > \"$1\"\n",
    )
    .expect("agent");
    fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let bin = sandbox.workdir.join("bin");
    fs::create_dir(&bin).expect("bin");
    let fake = bin.join("sh");
    let marker = sandbox.workdir.join("hijacked");
    fs::write(&fake, format!("#!/bin/sh\ntouch {}\n", marker.display())).expect("fake sh");
    fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let dotenv = sandbox.workdir.join(".env");
    fs::write(&dotenv, format!("PATH={}:$PATH\n", bin.display())).expect(".env");
    let out = sandbox.workdir.join("out");
    sandbox.manifest["agent"] = json!({"binary": agent, "args": [out]});
    sandbox.manifest["env"] = json!({"dotenv": dotenv});
    let run = sandbox.run_pid1();
    assert_eq!(run.code, 0, "{}\n{}", run.record, run.stderr);
    let interpreter = run.record["verification"]["agent"]["interpreter"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        interpreter.ends_with("/sh")
            && !interpreter.starts_with(&*sandbox.workdir.to_string_lossy()),
        "{}",
        run.record
    );
    assert!(!marker.exists(), "the planted interpreter ran");
    assert_eq!(
        fs::read_to_string(&out).expect("agent output"),
        "real agent ran\n"
    );
}
