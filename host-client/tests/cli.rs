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

/// `pitcrew COMMAND pc-nosuch --engine local --json` on an empty state directory: exits 1 with
/// an error object; returns its `error`.
fn unknown_sandbox_error(command: &str) -> Value {
    let state = tempfile::tempdir().unwrap();
    let out = pitcrew(&[
        command,
        "pc-nosuch",
        "--engine",
        "local",
        "--state-dir",
        state.path().to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    error_object(&out, "failed")
}

#[test]
fn inspect_json_of_an_unknown_sandbox_fails_with_an_error_object() {
    let error = unknown_sandbox_error("inspect");
    assert!(
        error["message"].as_str().unwrap().contains("pc-nosuch"),
        "{error:#}"
    );
}

#[test]
fn down_json_of_an_unknown_sandbox_fails_with_an_error_object() {
    unknown_sandbox_error("down");
}

#[test]
fn logs_json_of_an_unknown_sandbox_fails_with_an_error_object_naming_it() {
    let error = unknown_sandbox_error("logs");
    assert!(
        error["message"].as_str().unwrap().contains("pc-nosuch"),
        "{error:#}"
    );
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

/// Bash's completion of `words` (the last one being completed) with `pitcrew completions
/// bash` loaded, run in `dir`.
fn bash_complete(dir: &std::path::Path, words: &[&str]) -> Vec<String> {
    let script = dir.join("pitcrew.bash");
    std::fs::write(&script, pitcrew(&["completions", "bash"]).stdout).unwrap();
    let out = Command::new("bash")
        .current_dir(dir)
        .arg("-c")
        .arg(
            r#"source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1));
               _pitcrew_dynamic "$1" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}";
               printf '%s\n' "${COMPREPLY[@]}""#,
        )
        .arg("bash")
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_pitcrew"))
        .args(words)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut got: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    got.sort();
    got
}

#[test]
fn bash_completes_harness_files_after_a_harness_command_and_options_after_a_dash() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["a.yaml", "b.yml", "notes.txt"] {
        std::fs::write(dir.path().join(f), "").unwrap();
    }
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let got = bash_complete(dir.path(), &["validate", ""]);
    assert!(got.contains(&"a.yaml".to_string()), "{got:?}");
    assert!(got.contains(&"b.yml".to_string()), "{got:?}");
    assert!(got.contains(&"sub".to_string()), "{got:?}");
    assert!(!got.iter().any(|g| g.contains("notes")), "{got:?}");
    // An option is still clap's.
    let got = bash_complete(dir.path(), &["validate", "--js"]);
    assert_eq!(got, ["--json"]);
    // With no sandbox anywhere (an empty state directory, no other engine named), nothing.
    let got = bash_complete(
        dir.path(),
        &[
            "logs",
            "--engine",
            "local",
            "--state-dir",
            dir.path().to_str().unwrap(),
            "",
        ],
    );
    assert!(got.is_empty(), "{got:?}");
}

#[test]
fn bash_leaves_option_values_and_later_arguments_to_clap() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("h.yaml"), "").unwrap();
    // The value of --engine is clap's list, not files nor sandboxes.
    let got = bash_complete(dir.path(), &["run", "--engine", ""]);
    assert!(got.contains(&"podman".to_string()), "{got:?}");
    assert!(!got.contains(&"h.yaml".to_string()), "{got:?}");
    // After the harness, no more harness files.
    let got = bash_complete(dir.path(), &["validate", "h.yaml", ""]);
    assert!(!got.contains(&"h.yaml".to_string()), "{got:?}");
    // After a flag, the harness is still the first argument.
    let got = bash_complete(dir.path(), &["validate", "--json", ""]);
    assert_eq!(got, ["h.yaml"]);
}

#[test]
fn batch_help_offers_no_exec_engine_and_help_groups_the_engine_options() {
    let help = String::from_utf8_lossy(&pitcrew(&["batch", "--help"]).stdout).into_owned();
    assert!(
        help.contains("- kubernetes:") && !help.contains("- exec:"),
        "{help}"
    );
    assert!(!help.contains("--exec-template"), "{help}");
    assert!(!help.contains("--sandbox-root"), "{help}");
    let short = String::from_utf8_lossy(&pitcrew(&["batch", "-h"]).stdout).into_owned();
    assert!(
        short.contains("[possible values: local, podman, docker, kubernetes]"),
        "{short}"
    );
    // In the order of the engines, after the command's own options.
    let at = |h: &str, s: &str| h.find(s).unwrap_or_else(|| panic!("{s}: {h}"));
    let order = [
        "Options:",
        "Engine:",
        "Local engine:",
        "Podman, docker and kubernetes engines:",
        "Podman and docker engines:",
        "Kubernetes engine:",
    ];
    for pair in order.windows(2) {
        assert!(
            at(&short, pair[0]) < at(&short, pair[1]),
            "{pair:?}: {short}"
        );
    }
    assert!(
        at(&short, "--concurrency") < at(&short, "Engine:"),
        "{short}"
    );
    // batch refuses exec as a usage error, naming the engines it takes.
    let out = pitcrew(&["batch", "jobs.jsonl", "--engine", "exec"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("invalid value 'exec'"), "{stderr}");
    // ps groups its engine options the same way, and offers exec (it names a sandbox there).
    let ps = String::from_utf8_lossy(&pitcrew(&["ps", "-h"]).stdout).into_owned();
    assert!(
        ps.contains("Exec engine:") && ps.contains("Kubernetes engine:"),
        "{ps}"
    );
    assert!(ps.contains("exec, kubernetes]"), "{ps}");
    let run = String::from_utf8_lossy(&pitcrew(&["run", "-h"]).stdout).into_owned();
    assert!(run.contains("--exec-template"), "{run}");
}
