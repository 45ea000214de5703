//! The command-line conventions every `pitcrew` command shares, driven through the built binary:
//! a failure in `--json` mode is one JSON object on stdout (the human line stays on stderr),
//! with the exit code unchanged.

use serde_json::Value;
use std::process::{Command, Output};

fn pitcrew(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pitcrew"))
        .args(args)
        .env_remove("PITCREW_ENGINE")
        .env_remove("PITCREW_STATE_DIR")
        .output()
        .unwrap()
}

/// The error object of a failed `--json` command: stdout is exactly one JSON document whose
/// `error` has the message, the kind and the process's exit code; stderr has the human line.
fn error_object(out: &Output, kind: &str) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}{stderr}");
    let doc: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {stdout}"));
    let error = &doc["error"];
    assert_eq!(error["kind"], kind, "{doc:#}");
    assert_eq!(
        error["exit_code"].as_i64(),
        out.status.code().map(i64::from),
        "{doc:#}"
    );
    let message = error["message"].as_str().unwrap();
    assert!(!message.is_empty(), "{doc:#}");
    assert!(
        stderr.contains(message.split(':').next().unwrap()),
        "the human line stays on stderr: {stderr}"
    );
    error.clone()
}

#[test]
fn validate_json_of_a_missing_harness_fails_with_an_error_object() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.yaml");
    let out = pitcrew(&["validate", missing.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let error = error_object(&out, "failed");
    assert!(
        error["message"].as_str().unwrap().contains("nope.yaml"),
        "{error:#}"
    );
}

#[test]
fn inspect_json_of_an_unknown_sandbox_fails_with_an_error_object() {
    let state = tempfile::tempdir().unwrap();
    let out = pitcrew(&[
        "inspect",
        "pc-nosuch",
        "--engine",
        "local",
        "--state-dir",
        state.path().to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let error = error_object(&out, "failed");
    assert!(
        error["message"].as_str().unwrap().contains("pc-nosuch"),
        "{error:#}"
    );
}

#[test]
fn down_json_of_an_unknown_sandbox_fails_with_an_error_object() {
    let state = tempfile::tempdir().unwrap();
    let out = pitcrew(&[
        "down",
        "pc-nosuch",
        "--engine",
        "local",
        "--state-dir",
        state.path().to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    error_object(&out, "failed");
}

#[test]
fn ps_json_with_an_option_of_another_engine_fails_with_an_error_object() {
    let out = pitcrew(&[
        "ps",
        "--engine",
        "podman",
        "--supervisor",
        "/bin/true",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let error = error_object(&out, "failed");
    assert!(
        error["message"].as_str().unwrap().contains("--supervisor"),
        "{error:#}"
    );
}

#[test]
fn a_usage_error_with_json_is_an_error_object_with_exit_2() {
    let out = pitcrew(&["ps", "--engine", "bogus", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let error = error_object(&out, "usage");
    assert!(
        error["message"].as_str().unwrap().contains("bogus"),
        "{error:#}"
    );
    // Without --json, a usage error leaves stdout empty.
    let out = pitcrew(&["ps", "--engine", "bogus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    // Help asked with --json is help, not an error.
    let out = pitcrew(&["ps", "--json", "--help"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("Usage"));
}

#[test]
fn a_failure_without_json_prints_nothing_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.yaml");
    let out = pitcrew(&["validate", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope.yaml"));
}

#[test]
fn rm_is_down_and_stop_is_cancel() {
    let state = tempfile::tempdir().unwrap();
    for (alias, command) in [("rm", "down"), ("stop", "cancel")] {
        let help = pitcrew(&[alias, "--help"]);
        assert!(help.status.success());
        let help = String::from_utf8_lossy(&help.stdout);
        assert!(
            help.contains(&format!("Usage: pitcrew {command} ")),
            "{alias}: {help}"
        );
        let out = pitcrew(&[
            alias,
            "pc-nosuch",
            "--engine",
            "local",
            "--state-dir",
            state.path().to_str().unwrap(),
            "--json",
        ]);
        assert_eq!(out.status.code(), Some(1));
        error_object(&out, "failed");
    }
    // The top-level help names them.
    let help = pitcrew(&["--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("[alias: rm]"), "{help}");
    assert!(help.contains("[alias: stop]"), "{help}");
}
