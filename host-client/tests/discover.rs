//! `pitcrew discover`: pi's auto-discovery places scanned, candidates classified and hashed,
//! nothing imported or executed.
#![allow(non_snake_case)] // attack tests are named attack_<class>__<case> (scripts/security-report)

use serde_json::Value;
use std::fs;
use std::process::Command;

#[test]
fn lists_agent_dir_and_project_candidates_without_running_them() {
    let agent = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let marker = project.path().join("executed");
    // An extension that would leave a marker if anything ran it.
    let body = format!(
        "require('fs').writeFileSync({:?}, 'ran'); module.exports = () => {{}};\n",
        marker.display().to_string()
    );
    let ext = project.path().join(".pi/extensions/tracer");
    fs::create_dir_all(&ext).unwrap();
    fs::write(ext.join("index.js"), &body).unwrap();
    let single = agent.path().join("extensions");
    fs::create_dir_all(&single).unwrap();
    fs::write(single.join("one.ts"), "export default () => {};\n").unwrap();
    fs::create_dir_all(single.join("empty")).unwrap();
    fs::create_dir_all(single.join(".hidden")).unwrap();
    fs::create_dir_all(single.join("node_modules")).unwrap();

    let out = Command::new(env!("CARGO_BIN_EXE_pitcrew"))
        .arg("discover")
        .arg("--agent-dir")
        .arg(agent.path())
        .arg("--project")
        .arg(project.path())
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = json["candidates"].as_array().unwrap();
    assert_eq!(
        c.len(),
        3,
        "dot dirs and node_modules are skipped: {json:#}"
    );
    let by_name = |n: &str| {
        c.iter()
            .find(|x| x["path"].as_str().unwrap().ends_with(n))
            .unwrap_or_else(|| panic!("{n} missing in {json:#}"))
    };
    let empty = by_name("/empty");
    assert_eq!(empty["scope"], "agent-dir");
    assert!(empty["problem"]
        .as_str()
        .unwrap()
        .contains("no runtime would load"));
    assert!(empty["harness_entry"].is_null());
    let one = by_name("/one.ts");
    assert_eq!(one["shape"], "file");
    assert!(one["problem"].as_str().unwrap().contains("single-file"));
    let tracer = by_name("/tracer");
    assert_eq!(tracer["scope"], "project");
    assert_eq!(tracer["class"]["kind"], "pi");
    assert_eq!(tracer["class"]["entries"][0], "index.js");
    assert_eq!(tracer["harness_entry"], "plugins/tracer");
    assert_eq!(tracer["sha256"].as_str().unwrap().len(), 64);
    assert!(!marker.exists(), "discover must never load a candidate");

    // The text form prints the plugins: entry that enables it explicitly.
    let out = Command::new(env!("CARGO_BIN_EXE_pitcrew"))
        .arg("discover")
        .arg("--agent-dir")
        .arg(agent.path())
        .arg("--project")
        .arg(project.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("- plugins/tracer"), "{text}");
}

#[test]
fn absent_places_are_reported_not_errors() {
    let nowhere = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_pitcrew"))
        .arg("discover")
        .arg("--agent-dir")
        .arg(nowhere.path().join("none"))
        .arg("--project")
        .arg(nowhere.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("(absent)"), "{text}");
    assert!(text.contains("no candidates"), "{text}");
}

#[test]
fn attack_terminal__discover_escapes_names_from_the_project() {
    // The project is the untrusted repository: its extension names reach the operator's terminal.
    let project = tempfile::tempdir().unwrap();
    let agent = tempfile::tempdir().unwrap();
    let exts = project.path().join(".pi/extensions");
    fs::create_dir_all(&exts).unwrap();
    let name = "evil\u{1b}]0;pwned\u{7}\r\u{9b}2J\u{2067}";
    fs::write(
        exts.join(format!("{name}.ts")),
        "export default () => {};\n",
    )
    .unwrap();
    fs::create_dir_all(exts.join(name)).unwrap();
    fs::write(
        exts.join(name).join("index.js"),
        "module.exports = () => {};\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_pitcrew"))
        .arg("discover")
        .arg("--agent-dir")
        .arg(agent.path())
        .arg("--project")
        .arg(project.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let raw = pitcrew_e2e::raw_terminal_controls(&text);
    assert!(raw.is_empty(), "raw {raw:?} in {text:?}");
    assert!(
        text.contains("evil\\x1b]0;pwned\\x07\\r\\u{9b}2J\\u{2067}.ts (file)"),
        "{text}"
    );
    assert!(
        text.contains("- plugins/evil\\x1b]0;pwned\\x07\\r\\u{9b}2J\\u{2067}"),
        "{text}"
    );
}

/// Runs `pitcrew ARGS… PATH`, which must fail, naming `said` on stderr.
fn fails_saying(args: &[&str], path: &std::path::Path, said: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_pitcrew"))
        .args(args)
        .arg(path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?}: {err}");
    assert!(err.contains(said), "{args:?}: {err}");
}

#[test]
fn a_project_that_is_missing_or_a_file_is_named_as_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("notes.txt");
    fs::write(&file, "x").unwrap();
    let none = dir.path().join("none");
    let shown = |p: &std::path::Path| p.display().to_string();
    fails_saying(
        &["discover", "--project"],
        &none,
        &format!("--project {}: No such file or directory", shown(&none)),
    );
    fails_saying(
        &["discover", "--project"],
        &file,
        &format!("--project {}: not a directory", shown(&file)),
    );
    fails_saying(
        &["ps", "--engine", "local", "--state-dir"],
        &file,
        &format!("--state-dir {}: not a directory", shown(&file)),
    );
    fails_saying(
        &["collect", "pc-none", "--out"],
        &file,
        &format!("--out {}: not a directory", shown(&file)),
    );
}
