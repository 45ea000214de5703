//! The examples run as an operator would run them: the quickstart (`runtime: command`), and the
//! offline pi, Claude Code, Codex and OpenCode examples, each copied to a directory the agent's uid can read,
//! its model address pointed at a scripted model server on a free port (the examples name
//! 8377), and `pitcrew run` on it.
//!
//! Needs root, PID namespaces and the agent on PATH (pi 0.73.1, Claude Code); skipped
//! otherwise, or a failure with `PITCREW_REQUIRE_E2E=1`.

use pitcrew_e2e::model_server::{example_script, ModelServer, EXAMPLE_PORT};
use pitcrew_e2e::{agent_version, pitcrew_run, prerequisite, read_text, require_pid_namespaces};
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// The repository's `examples/NAME`.
fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
}

/// Copies `from` into `to` (directories 0755, files as they are), with the example port in
/// every file replaced by `port`.
fn copy_pointing_at(from: &Path, to: &Path, port: u16) {
    fs::create_dir_all(to).unwrap();
    fs::set_permissions(to, fs::Permissions::from_mode(0o755)).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        // Records of earlier runs of the example are not part of it.
        if entry.file_name() == "runs" {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            copy_pointing_at(&entry.path(), &dest, port);
        } else {
            let text = fs::read_to_string(entry.path()).unwrap();
            let text = text.replace(
                &format!("127.0.0.1:{EXAMPLE_PORT}"),
                &format!("127.0.0.1:{port}"),
            );
            fs::write(&dest, text).unwrap();
        }
    }
}

/// The example `name`, copied into a fresh directory and pointed at `server`: the directory,
/// the harness and a state dir.
fn prepared(name: &str, server: &ModelServer) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let port = server.origin().rsplit(':').next().unwrap().parse().unwrap();
    let root = dir.path().join(name);
    copy_pointing_at(&example(name), &root, port);
    let state = dir.path().join("state");
    fs::create_dir(&state).unwrap();
    (dir, root.join("harness.yaml"), state)
}

/// `pitcrew validate` on each example as it is: the network its run gets by default (its model
/// endpoint, or nothing for `runtime: command`) and where each endpoint came from, in the text
/// report, the JSON report and the manifest.
#[test]
fn validate_shows_each_examples_default_network_and_where_it_came_from() {
    for (name, line, allow) in [
        (
            "quickstart",
            "  network: none (the runtime's default)",
            None,
        ),
        (
            "pi",
            "  network: allow 127.0.0.1:8377 (models.json provider \"scripted\")",
            Some("127.0.0.1:8377"),
        ),
        (
            "claude",
            "  network: allow 127.0.0.1:8377 (env ANTHROPIC_BASE_URL)",
            Some("127.0.0.1:8377"),
        ),
        (
            "codex",
            "  network: allow 127.0.0.1:8377 (env OPENAI_BASE_URL)",
            Some("127.0.0.1:8377"),
        ),
        (
            "opencode",
            "  network: allow 127.0.0.1:8377 (env OPENAI_BASE_URL)",
            Some("127.0.0.1:8377"),
        ),
    ] {
        let harness = example(name).join("harness.yaml");
        let run = |args: &[&str]| {
            let out = std::process::Command::new(pitcrew_e2e::binary("pitcrew"))
                .arg("validate")
                .arg(&harness)
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "{name}: {out:?}");
            assert!(out.stderr.is_empty(), "{name}: {out:?}");
            String::from_utf8(out.stdout).unwrap()
        };
        let text = run(&[]);
        assert!(text.lines().any(|l| l == line), "{name}: {text}");
        let report: serde_json::Value = serde_json::from_str(&run(&["--json"])).unwrap();
        assert_eq!(report["network"]["default"], true, "{name}: {report:#}");
        let manifest: serde_json::Value = serde_json::from_str(&run(&["--emit-manifest"])).unwrap();
        match allow {
            None => {
                assert_eq!(report["network"]["mode"], "none", "{name}: {report:#}");
                assert_eq!(manifest["network"], serde_json::json!({"mode": "none"}));
            }
            Some(endpoint) => {
                assert_eq!(report["network"]["allow"][0]["endpoint"], endpoint);
                let (host, port) = endpoint.rsplit_once(':').unwrap();
                assert_eq!(
                    manifest["network"],
                    serde_json::json!({"mode": "allow", "allow": [
                        {"host": host, "port": port.parse::<u16>().unwrap()}
                    ]}),
                    "{name}"
                );
            }
        }
    }
}

#[test]
fn the_quickstart_runs_its_three_iterations_verified() {
    if !require_pid_namespaces() {
        return;
    }
    let server = ModelServer::start(example_script);
    let (_dir, harness, state) = prepared("quickstart", &server);
    let doc = pitcrew_run(&harness, &state, &[], &[]);
    let rows = doc["iterations"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{doc:#}");
    for row in rows {
        assert_eq!(row["exit_code"], 0, "{doc:#}");
        assert_eq!(row["verified"], true, "{doc:#}");
    }
    // The workspace persists across the iterations of one sandbox: the third saw three notes.
    let last = PathBuf::from(rows[2]["record_dir"].as_str().unwrap());
    assert!(
        read_text(&last.join("output.jsonl")).contains("workspace has 3 note(s)"),
        "{}",
        read_text(&last.join("output.jsonl"))
    );
}

#[test]
fn the_pi_example_runs_offline() {
    let pi = agent_version("pi");
    if !require_pid_namespaces()
        || !prerequisite(
            pi.as_deref() == Some("0.73.1"),
            &format!("needs pi 0.73.1 on PATH (scripts/install-agents), found {pi:?}"),
        )
    {
        return;
    }
    let server = ModelServer::start(example_script);
    let (_dir, harness, state) = prepared("pi", &server);
    let doc = pitcrew_run(&harness, &state, &[], &[]);
    let row = &doc["iterations"][0];
    assert_eq!(row["exit_code"], 0, "{doc:#}");
    assert_eq!(row["verified"], true, "{doc:#}");
    // The verified extension's tool ran and its answer reached the model.
    assert_eq!(server.tool_results(), vec!["Hello, pitcrew!".to_string()]);
}

#[test]
fn the_claude_example_runs_offline() {
    if !require_pid_namespaces()
        || !prerequisite(
            agent_version("claude").is_some(),
            "needs Claude Code on PATH (scripts/install-agents)",
        )
    {
        return;
    }
    let server = ModelServer::start(example_script);
    let (_dir, harness, state) = prepared("claude", &server);
    let doc = pitcrew_run(
        &harness,
        &state,
        &["--pass-env", "ANTHROPIC_API_KEY", "--collect-workspace"],
        &[("ANTHROPIC_API_KEY", "offline")],
    );
    let row = &doc["iterations"][0];
    assert_eq!(row["exit_code"], 0, "{doc:#}");
    assert_eq!(row["verified"], true, "{doc:#}");
    // The model's Bash call ran in the sandbox's workspace, and came back in the record.
    let record = PathBuf::from(row["record_dir"].as_str().unwrap());
    assert_eq!(
        read_text(&record.join("workspace/hello.txt")),
        "hello from the sandbox\n"
    );
    let results = server.tool_results();
    assert!(
        results.iter().any(|r| r.contains("hello from the sandbox")),
        "{results:#?}"
    );
}

#[test]
fn the_codex_example_runs_offline() {
    if !require_pid_namespaces()
        || !prerequisite(
            agent_version("codex").is_some(),
            "needs the Codex CLI on PATH (scripts/install-agents)",
        )
    {
        return;
    }
    let server = ModelServer::start(example_script);
    let (_dir, harness, state) = prepared("codex", &server);
    let doc = pitcrew_run(
        &harness,
        &state,
        &["--pass-env", "OPENAI_API_KEY", "--collect-workspace"],
        &[("OPENAI_API_KEY", "offline")],
    );
    let row = &doc["iterations"][0];
    assert_eq!(row["exit_code"], 0, "{doc:#}");
    assert_eq!(row["verified"], true, "{doc:#}");
    // The model's exec_command call ran in the sandbox's workspace, and came back in the record.
    let record = PathBuf::from(row["record_dir"].as_str().unwrap());
    assert_eq!(
        read_text(&record.join("workspace/hello.txt")),
        "hello from the sandbox\n"
    );
    let results = server.tool_results();
    assert!(
        results.iter().any(|r| r.contains("hello from the sandbox")),
        "{results:#?}"
    );
}

#[test]
fn the_opencode_example_runs_offline() {
    if !require_pid_namespaces()
        || !prerequisite(
            agent_version("opencode").is_some(),
            "needs OpenCode on PATH (scripts/install-agents)",
        )
    {
        return;
    }
    let server = ModelServer::start(example_script);
    let (_dir, harness, state) = prepared("opencode", &server);
    let doc = pitcrew_run(
        &harness,
        &state,
        &["--pass-env", "OPENAI_API_KEY", "--collect-workspace"],
        &[("OPENAI_API_KEY", "offline")],
    );
    let row = &doc["iterations"][0];
    assert_eq!(row["exit_code"], 0, "{doc:#}");
    assert_eq!(row["verified"], true, "{doc:#}");
    // The model's bash call ran in the sandbox's workspace, and the verified plugin's hook saw it.
    let record = PathBuf::from(row["record_dir"].as_str().unwrap());
    assert_eq!(
        read_text(&record.join("workspace/hello.txt")),
        "hello from the sandbox\n"
    );
    assert_eq!(
        read_text(&record.join("workspace/tool-calls.log")),
        "bash\n"
    );
    let results = server.tool_results();
    assert!(
        results.iter().any(|r| r.contains("hello from the sandbox")),
        "{results:#?}"
    );
}

#[test]
fn the_scripted_model_server_answers_help_and_names_a_bad_port() {
    let bin = pitcrew_e2e::binary("scripted-model");
    let out = std::process::Command::new(&bin)
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{help}");
    assert!(help.starts_with("Usage: scripted-model [PORT]"), "{help}");
    assert!(help.contains("default 8377"), "{help}");
    let out = std::process::Command::new(&bin)
        .arg("port")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("--help says more"), "{said}");
}
