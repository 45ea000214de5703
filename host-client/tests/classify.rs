//! `pitcrew classify` driven as a user would: the built binary on tempdir fixtures.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

fn pitcrew(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pitcrew"))
        .arg("classify")
        .args(args)
        .output()
        .unwrap()
}

fn write(root: &Path, files: &[(&str, &str)]) {
    for (path, contents) in files {
        let full = root.join(path);
        fs::create_dir_all(full.parent().unwrap()).unwrap();
        fs::write(full, contents).unwrap();
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

#[test]
fn pi_manifest_text() {
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        &[
            (
                "package.json",
                r#"{"pi":{"extensions":["./src/main.ts","./src/other.ts"]}}"#,
            ),
            (
                "src/main.ts",
                "pi.registerFlag(\"loud\", {type: \"boolean\"})",
            ),
            ("src/other.ts", "export default () => {}"),
        ],
    );
    let out = pitcrew(&[d.path().as_os_str()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "pi extension (package.json pi manifest): src/main.ts, src/other.ts\nregistered flags: --loud\n"
    );
}

#[test]
fn claude_text() {
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        &[
            (".claude-plugin/plugin.json", r#"{"name":"review"}"#),
            ("hooks/hooks.json", "{}"),
        ],
    );
    let out = pitcrew(&[d.path().as_os_str()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "claude plugin \"review\" (.claude-plugin/plugin.json)\nruns code through: hooks\n"
    );
}

#[test]
fn json_output() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), &[("index.ts", "export default () => {}")]);
    let out = pitcrew(&[d.path().as_os_str(), "--json".as_ref()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "kind": "pi",
            "rule": "index",
            "entries": ["index.ts"],
            "registered_flags": [],
            "registered_tools": [],
            "path": d.path().to_str().unwrap(),
        })
    );
}

#[test]
fn refusal_exits_1_with_message() {
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        &[
            ("index.ts", "export default () => {}"),
            ("skills/s/SKILL.md", "x"),
        ],
    );
    for json in [false, true] {
        let mut args = vec![d.path().as_os_str()];
        if json {
            args.push("--json".as_ref());
        }
        let out = pitcrew(&args);
        assert_eq!(out.status.code(), Some(1));
        if json {
            // `--json`: the refusal as an error object on stdout too.
            let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
            assert_eq!(doc["error"]["kind"], "failed", "{doc:#}");
            assert_eq!(doc["error"]["exit_code"], 1, "{doc:#}");
            let message = doc["error"]["message"].as_str().unwrap();
            assert!(message.contains("skills/ present"), "{doc:#}");
        } else {
            assert!(stdout(&out).is_empty());
        }
        let err = stderr(&out);
        assert!(
            err.starts_with(&format!("pitcrew: {}: skills/ present", d.path().display())),
            "{err}"
        );
        assert!(err.contains("would be silently ignored"), "{err}");
    }
}

#[test]
fn not_a_plugin_and_missing_dir() {
    let d = tempfile::tempdir().unwrap();
    let out = pitcrew(&[d.path().as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no runtime would load this directory"));
    let out = pitcrew(&[d.path().join("nope").as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("cannot read the plugin directory"),
        "{}",
        stderr(&out)
    );
}
