//! `pitcrew validate` driven as a user would: harness files in temp dirs, the built binary,
//! one test per validation rule, each problem checked for its location and its rule.

// Tests that play an attacker are named `attack_<class>__<case>` (the security report's naming).
#![allow(non_snake_case)]

use serde_json::Value;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

fn write(root: &Path, rel: &str, body: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, body).unwrap();
}

/// A harness directory with one clean pi extension and one Claude plugin.
fn fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "plugins/hello/index.ts",
        "export default function (pi) { pi.registerFlag(\"greeting\", { type: \"string\" }); pi.registerFlag('loud', { type: 'boolean' }); }\n",
    );
    write(
        root,
        "plugins/claudy/.claude-plugin/plugin.json",
        "{\"name\": \"claudy\"}\n",
    );
    write(root, "plugins/claudy/skills/x/SKILL.md", "# x\n");
    write(root, "adapters/hooks.js", "export default function () {}\n");
    write(root, "config/models.json", "{}\n");
    write(root, "skills/review/SKILL.md", "# review\n");
    fs::create_dir_all(root.join("workspace")).unwrap();
    dir
}

fn validate(root: &Path, harness: &str, extra: &[&str]) -> (Output, Value) {
    write(root, "harness.yaml", harness);
    let out = Command::new(env!("CARGO_BIN_EXE_pitcrew"))
        .arg("validate")
        .arg(root.join("harness.yaml"))
        .arg("--json")
        .args(extra)
        .output()
        .unwrap();
    let json = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out, json)
}

/// The problems as `line:field: message` strings.
fn problems(json: &Value) -> Vec<String> {
    json["problems"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|p| {
            format!(
                "{}:{}: {}",
                p["location"]["line"],
                p["field"].as_str().unwrap_or(""),
                p["message"].as_str().unwrap_or("")
            )
        })
        .collect()
}

fn assert_problem(json: &Value, line: u64, field: &str, needle: &str) {
    let all = problems(json);
    assert!(
        all.iter()
            .any(|p| p.starts_with(&format!("{line}:{field}:")) && p.contains(needle)),
        "expected a problem at line {line} for {field} containing {needle:?}; got {all:#?}"
    );
}

const CLEAN: &str = "\
runtime: pi
prompt: please call hello_tool
agent:
  model: mock/mock-model
  tools: [read, bash]
plugins:
  - path: plugins/hello
    env:
      GREETING_LEVEL: \"3\"
    pi:
      args: [\"--greeting=Hello\", \"--loud\"]
  - plugins/claudy
adapters:
  - path: adapters/hooks.js
    role: hook-adapter
    use: pi-extension
  - path: config/models.json
    role: config
skills:
  - skills/review
env:
  LANG: C.UTF-8
iterations: 3
timeout: 15m
workdir: workspace
";

#[test]
fn clean_harness_validates_and_reports_what_it_checked() {
    let dir = fixture();
    let (out, json) = validate(dir.path(), CLEAN, &[]);
    assert!(
        out.status.success(),
        "{json:#}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json["ok"], true);
    assert_eq!(json["runtime"], "pi");
    let plugins = json["plugins"].as_array().unwrap();
    assert_eq!(plugins[0]["class"]["kind"], "pi");
    assert_eq!(plugins[0]["loaded"], true);
    assert_eq!(plugins[1]["class"]["kind"], "claude");
    assert_eq!(
        plugins[1]["loaded"], false,
        "pi names and skips a Claude plugin"
    );
    // Whether the agent binary is on this host's PATH adds a note of its own: find the one.
    assert!(
        json["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["field"] == "plugins[1]"
                && n["message"].as_str().unwrap().contains("names and skips")),
        "{json:#}"
    );
    // The digest is the same one `pitcrew hash` prints for the directory.
    let hash = Command::new(env!("CARGO_BIN_EXE_pitcrew"))
        .args(["hash", "--json"])
        .arg(dir.path().join("plugins/hello"))
        .output()
        .unwrap();
    let hash: Value = serde_json::from_slice(&hash.stdout).unwrap();
    assert_eq!(plugins[0]["sha256"], hash["sha256"]);
}

#[test]
fn emitted_manifest_carries_digests_entries_and_sandbox_paths() {
    let dir = fixture();
    let (out, _) = validate(dir.path(), CLEAN, &[]);
    assert!(out.status.success());
    let out = Command::new(env!("CARGO_BIN_EXE_pitcrew"))
        .arg("validate")
        .arg(dir.path().join("harness.yaml"))
        .args(["--emit-manifest", "--sandbox-root", "/sbx"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(m["version"], 1);
    assert_eq!(m["runtime"], "pi");
    assert_eq!(m["agent"]["binary"], "pi");
    assert_eq!(m["workdir"], "/sbx/workspace");
    let hello = &m["trees"][0];
    assert_eq!(hello["path"], "/sbx/plugins/hello");
    assert_eq!(hello["kind"], "pi-extension");
    assert_eq!(hello["entries"][0], "index.ts");
    assert_eq!(hello["role"], "plugin");
    assert_eq!(hello["files"][0]["path"], "index.ts");
    assert_eq!(hello["env"]["GREETING_LEVEL"], "3");
    assert_eq!(
        m["trees"][1]["kind"], "data",
        "a Claude plugin is data for pi"
    );
    assert_eq!(m["trees"][2]["role"], "skill");
    assert_eq!(m["files"][0]["path"], "/sbx/adapters/hooks.js");
    assert_eq!(m["files"][0]["use"], "pi-extension");
    assert_eq!(m["files"][1]["path"], "/sbx/config/models.json");
    assert_eq!(m["files"][1]["role"], "config");
    assert_eq!(m["limits"]["timeout_ms"], 900_000);
}

#[test]
fn every_problem_is_reported_at_once_with_its_location() {
    let dir = fixture();
    let harness = "\
runtime: pi
prompt: hi
plugins:
  - path: plugins/hello
    env:
      NODE_OPTIONS: --require /tmp/x.js
      lower: x
    pi:
      args: [\"--model=evil\", \"stray\"]
  - npm:left-pad
  - ../outside
env:
  LD_PRELOAD: /x.so
  PATH: /bin
surprise: 1
";
    let (out, json) = validate(dir.path(), harness, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json["ok"], false);
    assert_problem(&json, 6, "plugins[0].env.NODE_OPTIONS", "refused");
    assert_problem(&json, 7, "plugins[0].env.lower", "upper-case");
    assert_problem(&json, 9, "plugins[0].pi.args[0]", "pi's own options");
    assert_problem(&json, 9, "plugins[0].pi.args[1]", "bare word");
    assert_problem(&json, 10, "plugins[1].path", "npm: sources are refused");
    assert_problem(&json, 11, "plugins[2].path", "'..'");
    assert_problem(&json, 13, "env.LD_PRELOAD", "refused");
    assert_problem(&json, 14, "env.PATH", "pinned by the supervisor");
    assert_problem(&json, 15, "surprise", "unknown key");
    assert!(problems(&json).len() >= 9);
}

#[test]
fn text_output_names_file_line_and_rule() {
    let dir = fixture();
    write(
        dir.path(),
        "harness.yaml",
        "runtime: pi\nprompt: hi\nplugins:\n  - git:github.com/x/y\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_pitcrew"))
        .arg("validate")
        .arg(dir.path().join("harness.yaml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("harness.yaml:4:5: plugins[0].path:"),
        "{stderr}"
    );
    assert!(stderr.contains("git: sources are refused"), "{stderr}");
    assert!(stderr.contains("1 problem"), "{stderr}");
}

#[test]
fn pi_args_must_be_flags_the_extension_registers() {
    let dir = fixture();
    let harness = "runtime: pi\nprompt: hi\nplugins:\n  - path: plugins/hello\n    pi:\n      args: [\"--greeting=x\", \"--shout\"]\n";
    let (_, json) = validate(dir.path(), harness, &[]);
    assert_problem(
        &json,
        4,
        "plugins[0].pi.args[1]",
        "not registered by this extension",
    );
    assert_eq!(problems(&json).len(), 1, "{:#?}", problems(&json));
}

#[test]
fn claude_plugin_takes_no_env_or_pi_options() {
    let dir = fixture();
    let harness = "runtime: claude\nprompt: hi\nplugins:\n  - path: plugins/claudy\n    env:\n      GREETING: x\n";
    let (_, json) = validate(dir.path(), harness, &[]);
    assert_problem(&json, 4, "plugins[0].env", "Claude plugin takes no env");
}

#[test]
fn two_plugins_uploading_under_one_name_are_refused() {
    let dir = fixture();
    write(
        dir.path(),
        "more/hello/index.js",
        "module.exports = () => {};\n",
    );
    let harness = "runtime: pi\nprompt: hi\nplugins:\n  - plugins/hello\n  - more/hello\n";
    let (_, json) = validate(dir.path(), harness, &[]);
    assert_problem(&json, 5, "plugins[1]", "same name \"hello\"");
}

#[test]
fn symlinks_inside_plugin_trees_are_refused() {
    let dir = fixture();
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("plugins/hello/passwd")).unwrap();
    let harness = "runtime: pi\nprompt: hi\nplugins:\n  - plugins/hello\n";
    let (_, json) = validate(dir.path(), harness, &[]);
    assert_problem(&json, 4, "plugins[0]", "symlink");
}

#[test]
fn a_plugin_symlinked_outside_the_harness_is_refused() {
    let dir = fixture();
    let elsewhere = tempfile::tempdir().unwrap();
    write(
        elsewhere.path(),
        "ext/index.ts",
        "export default () => {};\n",
    );
    std::os::unix::fs::symlink(
        elsewhere.path().join("ext"),
        dir.path().join("plugins/linked"),
    )
    .unwrap();
    let harness = "runtime: pi\nprompt: hi\nplugins:\n  - plugins/linked\n";
    let (_, json) = validate(dir.path(), harness, &[]);
    assert_problem(&json, 4, "plugins[0].path", "outside the harness directory");
}

#[test]
fn plugin_format_problems_surface_with_the_plugin_location() {
    let dir = fixture();
    write(dir.path(), "plugins/silent/package.json", "{\"pi\": {}}\n");
    write(
        dir.path(),
        "plugins/silent/index.ts",
        "export default () => {};\n",
    );
    write(dir.path(), "plugins/nothing/README.md", "hi\n");
    let harness = "runtime: pi\nprompt: hi\nplugins:\n  - plugins/silent\n  - plugins/nothing\n";
    let (_, json) = validate(dir.path(), harness, &[]);
    let all = problems(&json);
    assert!(
        all.iter().any(|p| p.starts_with("4:plugins[0]:")),
        "{all:#?}"
    );
    assert!(
        all.iter().any(|p| p.starts_with("5:plugins[1]:")),
        "{all:#?}"
    );
}

#[test]
fn runtime_and_shape_rules() {
    let dir = fixture();
    let cases: &[(&str, u64, &str, &str)] = &[
        ("runtime: bash\n", 1, "runtime", "not a runtime"),
        ("runtime: pi\n", 1, "prompt", "needs a prompt"),
        ("runtime: command\n", 1, "command", "non-empty"),
        ("runtime: pi\nprompt: -x\n", 2, "prompt", "option"),
        ("runtime: command\ncommand: [/bin/true]\niterations: 0\n", 3, "iterations", "1 to 1000"),
        ("runtime: command\ncommand: [/bin/true]\ntimeout: 5y\n", 3, "timeout", "unknown unit"),
        ("runtime: command\ncommand: [/bin/true]\nplugins: plugins/hello\n", 3, "plugins", "expected a list"),
        ("runtime: command\ncommand: [/bin/true]\nworkdir: /tmp\n", 3, "workdir", "absolute"),
        ("runtime: command\ncommand: [bin/x]\n", 2, "command[0]", "absolute"),
        (
            "runtime: command\ncommand: [/bin/true]\nadapters:\n  - path: adapters/hooks.js\n    role: wizard\n",
            5,
            "adapters[0].role",
            "not an adapter role",
        ),
        (
            "runtime: command\ncommand: [/bin/true]\nadapters:\n  - path: adapters/hooks.js\n    role: hook-adapter\n    use: pi-extension\n",
            6,
            "adapters[0].use",
            "loaded by pi",
        ),
        (
            "runtime: command\ncommand: [/bin/true]\nadapters:\n  - path: adapters/missing.js\n    role: config\n",
            4,
            "adapters[0].path",
            "does not exist (",
        ),
        (
            "runtime: command\ncommand: [/bin/true]\nadapters:\n  - path: adapters/hooks.js\n    sha256: abc\n    role: config\n",
            5,
            "adapters[0].sha256",
            "a local path is pinned automatically",
        ),
        ("runtime: command\ncommand: [/bin/true]\nvalidation: make test\n", 3, "validation", "argv list"),
    ];
    for (harness, line, field, needle) in cases {
        let (out, json) = validate(dir.path(), harness, &[]);
        assert_eq!(out.status.code(), Some(1), "{harness}");
        assert_problem(&json, *line, field, needle);
    }
}

#[test]
fn unreadable_or_malformed_harness_is_one_clear_line() {
    let dir = fixture();
    let out = Command::new(env!("CARGO_BIN_EXE_pitcrew"))
        .arg("validate")
        .arg(dir.path().join("missing.yaml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("missing.yaml"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(!stderr.contains("panicked"));

    write(
        dir.path(),
        "bad.yaml",
        "runtime: [pi\nprompt: \"unterminated\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_pitcrew"))
        .arg("validate")
        .arg(dir.path().join("bad.yaml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad.yaml"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn attack_terminal__validate_escapes_the_names_it_quotes() {
    // A vendored plugin carries a file whose name is a terminal escape sequence (a symlink, so
    // validation refuses it and quotes its name).
    let dir = fixture();
    let name = "x\u{1b}[2J\u{7}\u{202e}.js";
    std::os::unix::fs::symlink("index.ts", dir.path().join("plugins/hello").join(name)).unwrap();
    write(
        dir.path(),
        "harness.yaml",
        "runtime: pi\nprompt: hi\nplugins:\n  - plugins/hello\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_pitcrew"))
        .arg("validate")
        .arg(dir.path().join("harness.yaml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("symlink"), "{stderr}");
    assert!(
        pitcrew_e2e::raw_terminal_controls(&stderr).is_empty(),
        "raw {:?} in {stderr:?}",
        pitcrew_e2e::raw_terminal_controls(&stderr)
    );
    // The tree hash quotes the name with Rust's escapes; the bidi override is escaped too.
    assert!(
        stderr.contains("[2J") && stderr.contains("\\u{202e}.js"),
        "{stderr}"
    );
    // --json stays exact: the message as validation wrote it (JSON escapes what it must).
    let (_, json) = validate(
        dir.path(),
        "runtime: pi\nprompt: hi\nplugins:\n  - plugins/hello\n",
        &[],
    );
    assert!(
        problems(&json).iter().any(|p| p.contains("\u{202e}.js")),
        "{json}"
    );
}

/// `pitcrew validate FILE` (text): its exit code and stderr.
fn validate_text(root: &Path, harness: &str) -> (Option<i32>, String) {
    write(root, "harness.yaml", harness);
    let out = Command::new(env!("CARGO_BIN_EXE_pitcrew"))
        .arg("validate")
        .arg(root.join("harness.yaml"))
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn attack_harness__a_duplicate_top_level_key_is_refused_with_both_locations() {
    // The second `runtime:` would silently win (and a reviewer reads the first).
    let dir = fixture();
    let file = dir.path().join("harness.yaml");
    let (code, stderr) = validate_text(
        dir.path(),
        "runtime: command\ncommand: [/bin/true]\nruntime: pi\nprompt: hi\n",
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{f}:3:1: duplicate key \"runtime\" (first at {f}:1:1)",
            f = file.display()
        )),
        "{stderr}"
    );
}

#[test]
fn attack_harness__a_duplicate_env_name_is_refused_with_both_locations() {
    let dir = fixture();
    let file = dir.path().join("harness.yaml");
    let (code, stderr) = validate_text(
        dir.path(),
        "runtime: command\ncommand: [/bin/true]\nenv:\n  LANG: C.UTF-8\n  OTHER: x\n  LANG: \"evil\"\n",
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{f}:6:3: duplicate key \"LANG\" (first at {f}:4:3)",
            f = file.display()
        )),
        "{stderr}"
    );
    // In a plugin's env too, and in a flow mapping.
    let (code, stderr) = validate_text(
        dir.path(),
        "runtime: pi\nprompt: hi\nplugins:\n  - path: plugins/hello\n    env: {A: \"1\", A: \"2\"}\n",
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("duplicate key \"A\""), "{stderr}");
}

#[test]
fn attack_harness__a_timeout_past_its_maximum_is_refused_naming_file_line_and_maximum() {
    // 2^64-1 ms (584 million years) was taken as a timeout.
    let dir = fixture();
    let file = dir.path().join("harness.yaml");
    let (code, stderr) = validate_text(
        dir.path(),
        "runtime: command\ncommand: [/bin/true]\ntimeout: 18446744073709551615ms\n",
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}:3:10: timeout: \"18446744073709551615ms\" is more than 168h, the most it may be",
            file.display()
        )),
        "{stderr}"
    );
    let (code, stderr) = validate_text(
        dir.path(),
        "runtime: command\ncommand: [/bin/true]\ntimeout: 168h\n",
    );
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn attack_output_path__an_output_symlinked_outside_the_harness_is_refused() {
    let dir = fixture();
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("out")).unwrap();
    let base = "runtime: command\ncommand: [/bin/true]\n";
    let (out, json) = validate(dir.path(), &format!("{base}output: out/records\n"), &[]);
    assert_eq!(out.status.code(), Some(1), "{json}");
    assert_problem(&json, 3, "output", "is a symlink");
    let all = problems(&json).join("\n");
    assert!(
        all.contains(&dir.path().join("out").display().to_string()),
        "{all}"
    );
    // The default `runs` is checked the same way.
    std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("runs")).unwrap();
    let (out, json) = validate(dir.path(), base, &[]);
    assert_eq!(out.status.code(), Some(1), "{json}");
    assert!(
        problems(&json)
            .iter()
            .any(|p| p.contains("output") && p.contains("runs") && p.contains("symlink")),
        "{json}"
    );
    // A real directory (or one that does not exist yet) is fine.
    fs::remove_file(dir.path().join("runs")).unwrap();
    let (out, json) = validate(dir.path(), &format!("{base}output: records/here\n"), &[]);
    assert_eq!(out.status.code(), Some(0), "{json}");
}

#[test]
fn processes_sets_the_agents_process_limit_and_is_checked() {
    let dir = fixture();
    let with = |line: &str| format!("{CLEAN}{line}\n");
    let (out, _) = validate(dir.path(), &with("processes: 256"), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_pitcrew"))
        .arg("validate")
        .arg(dir.path().join("harness.yaml"))
        .arg("--emit-manifest")
        .output()
        .unwrap();
    let m: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(m["limits"]["processes"], 256, "{m:#}");
    for bad in ["processes: 0", "processes: many", "processes: 99999999"] {
        let (out, json) = validate(dir.path(), &with(bad), &[]);
        assert!(!out.status.success(), "{bad}");
        let found = problems(&json);
        assert!(
            found
                .iter()
                .any(|p| p.contains("processes") && p.contains("expected an integer")),
            "{bad}: {found:?}"
        );
    }
}

#[test]
fn lock_takes_json_too() {
    let dir = fixture();
    let root = dir.path();
    write(
        root,
        "harness.yaml",
        "runtime: command\ncommand: [/bin/true]\nworkdir: workspace\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_pitcrew"))
        .arg("lock")
        .arg(root.join("harness.yaml"))
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ok"], true, "{doc:#}");
    assert_eq!(doc["lock_file"], Value::Null, "{doc:#}");
    assert_eq!(doc["entries"], 0, "{doc:#}");
    assert!(doc["problems"].as_array().unwrap().is_empty(), "{doc:#}");
    // A harness with a problem: the same document, `ok: false`, exit 1.
    write(
        root,
        "harness.yaml",
        "runtime: command\ncommand: [/bin/true]\nworkdir: nope\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_pitcrew"))
        .arg("lock")
        .arg(root.join("harness.yaml"))
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ok"], false, "{doc:#}");
    assert_eq!(doc["problems"][0]["field"], "workdir", "{doc:#}");
}
