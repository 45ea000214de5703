//! The command-line conventions of `pitcrew`'s operator commands on a real kept sandbox of the
//! local engine: `ps --filter` and `--format`, `logs`, `-q` on `cancel`, `collect` and `down`,
//! and the completion of sandbox ids.
//!
//! Needs root and PID namespaces; skipped otherwise, or a failure with `PITCREW_REQUIRE_E2E=1`.

use pitcrew_e2e::{binary, pitcrew_run, require_pid_namespaces, LocalFixture};
use std::process::Command;

/// `pitcrew <args…> --state-dir <state>`: its stdout, after checking it succeeded.
fn ok(fx: &LocalFixture, args: &[&str]) -> String {
    let out = fx.output(args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn ps_filters_and_formats_a_kept_sandbox() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = LocalFixture::new("echo ran", 1, "", false);
    let doc = pitcrew_run(&fx.harness, &fx.state, &["--keep"], &[]);
    let id = doc["sandbox"].as_str().unwrap().to_string();

    let line = ok(
        &fx,
        &[
            "ps",
            "--engine",
            "local",
            "--filter",
            &format!("id={}", &id[..5]),
            "--format",
            "{{.ID}}\\t{{.Image}}\\t{{.Engine}}\\t{{.State}}",
        ],
    );
    assert_eq!(line, format!("{id}\t-\tlocal\tkept\n"));
    // Filters of different keys must all match; `running` matches a kept sandbox.
    let none = ok(
        &fx,
        &["ps", "--engine", "local", "--filter", "state=in-run", "-q"],
    );
    assert_eq!(none, "");
    let running = ok(
        &fx,
        &[
            "ps",
            "--engine",
            "local",
            "--filter",
            "status=running",
            "-q",
        ],
    );
    assert_eq!(running, format!("{id}\n"));
    // The default table: an IMAGE column and a relative creation time.
    let table = ok(&fx, &["ps", "--engine", "local"]);
    let header = table.lines().next().unwrap();
    assert!(
        header.contains("IMAGE") && header.contains("CREATED"),
        "{table}"
    );
    assert!(table.contains(" ago"), "{table}");
    // JSON: the absolute time, and `--format json` is the same document.
    let json: serde_json::Value =
        serde_json::from_str(&ok(&fx, &["ps", "--engine", "local", "--json"])).unwrap();
    let created = json[0]["created_at"].as_str().unwrap();
    assert!(created.ends_with('Z') && created.contains('T'), "{json:#}");
    assert_eq!(json[0]["image"], serde_json::Value::Null);
    let same: serde_json::Value =
        serde_json::from_str(&ok(&fx, &["ps", "--engine", "local", "--format", "json"])).unwrap();
    assert_eq!(same[0]["id"], json[0]["id"]);
    // An unknown field is refused, naming it and the valid ones, before any engine is asked.
    let out = fx.output(&["ps", "--engine", "local", "--format", "{{.Colour}}"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(".Colour") && stderr.contains("{{.Image}}"),
        "{stderr}"
    );

    ok(&fx, &["down", &id]);
}

#[test]
fn logs_prints_and_follows_a_local_sandboxs_supervisor_log_until_it_stops() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = LocalFixture::new("echo ran", 1, "", false);
    // The supervisor logs each upload at info level: a log with lines in it.
    let doc = pitcrew_run(&fx.harness, &fx.state, &["--keep"], &[("RUST_LOG", "info")]);
    let id = doc["sandbox"].as_str().unwrap().to_string();
    let log = fx.state.join("sandboxes").join(&id).join("supervisor.log");
    let printed = ok(&fx, &["logs", &id]);
    assert!(printed.contains("INFO"), "{printed}");
    assert_eq!(printed, std::fs::read_to_string(&log).unwrap());
    // --json: one object per line, naming the sandbox, each line without its newline.
    let json = ok(&fx, &["logs", &id, "--json"]);
    let mut lines = String::new();
    for object in json.lines() {
        let v: serde_json::Value = serde_json::from_str(object).unwrap();
        assert_eq!(v["sandbox"], id.as_str(), "{object}");
        lines.push_str(v["line"].as_str().unwrap());
        lines.push('\n');
    }
    assert_eq!(lines, printed);

    // Following: what a second run adds is printed, and `logs` ends when the sandbox stops.
    let follow = fx
        .pitcrew(&["logs", &id, "--follow"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let again = pitcrew_run(&fx.harness, &fx.state, &["--sandbox", &id], &[]);
    assert_eq!(again["sandbox"], id.as_str());
    ok(&fx, &["down", &id, "--keep"]);
    let out = follow.wait_with_output().unwrap();
    let followed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{followed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let whole = std::fs::read_to_string(&log).unwrap();
    assert!(whole.len() > printed.len(), "the second run logged nothing");
    assert_eq!(followed, whole);

    // An id nothing knows is an error naming it.
    let out = fx.output(&["logs", "pc-00000000", "--engine", "local"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pc-00000000"));
    ok(&fx, &["down", &id]);
}

#[test]
fn quiet_cancel_collect_and_down_print_what_a_script_needs() {
    if !require_pid_namespaces() {
        return;
    }
    // An iteration that runs until it is cancelled.
    let fx = LocalFixture::new("touch running\nwhile :; do sleep 0.1; done", 1, "", false);
    let h = fx.harness.to_str().unwrap();
    let run = fx
        .pitcrew(&["run", h, "--keep", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let id = fx.wait_sandbox();
    let running = fx.sandbox_dir(&id).join("root/workspace/running");
    assert!(
        pitcrew_e2e::busy_wait(std::time::Duration::from_secs(30), || running.exists()),
        "the agent never started"
    );
    // cancel -q: the id alone, as `podman stop` prints it.
    assert_eq!(ok(&fx, &["-q", "cancel", &id]), format!("{id}\n"));
    let out = run.wait_with_output().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    assert_eq!(doc["sandbox"], id.as_str(), "{doc:#}");
    // Nothing runs now: under -q that is still an error on stderr, and stdout stays empty.
    let idle = fx.output(&["-q", "cancel", &id]);
    assert_eq!(idle.status.code(), Some(1));
    assert!(idle.stdout.is_empty(), "{idle:?}");
    assert!(
        String::from_utf8_lossy(&idle.stderr).contains("nothing to cancel"),
        "{idle:?}"
    );

    // collect -q: the record's directory alone.
    let out_dir = fx.root.join("collected");
    let printed = ok(
        &fx,
        &["-q", "collect", &id, "--out", out_dir.to_str().unwrap()],
    );
    let dest = std::fs::canonicalize(&out_dir).unwrap().join("iteration-1");
    assert_eq!(printed, format!("{}\n", dest.display()));
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dest.join("result.json")).unwrap()).unwrap();
    assert_eq!(record["iteration"], 1, "{record:#}");
    // --json wins over -q.
    let json = ok(
        &fx,
        &[
            "-q",
            "collect",
            &id,
            "--out",
            out_dir.to_str().unwrap(),
            "--json",
        ],
    );
    let summary: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(summary["record_dir"], dest.to_str().unwrap(), "{summary:#}");

    // down -q (and its alias rm): the id alone, as `podman rm` prints it.
    assert_eq!(ok(&fx, &["-q", "rm", &id]), format!("{id}\n"));
    assert!(!fx.sandbox_dir(&id).exists());
}

/// Bash's completion of `words` with `pitcrew completions bash` loaded (`PITCREW_STATE_DIR`
/// naming the fixture's state).
fn bash_complete(fx: &LocalFixture, words: &[&str]) -> Vec<String> {
    let script = fx.state.join("../pitcrew.bash");
    let generated = Command::new(binary("pitcrew"))
        .args(["completions", "bash"])
        .output()
        .unwrap();
    std::fs::write(&script, generated.stdout).unwrap();
    let out = Command::new("bash")
        .arg("-c")
        .arg(
            r#"source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1));
               _pitcrew_dynamic "$1" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}";
               printf '%s\n' "${COMPREPLY[@]}""#,
        )
        .arg("bash")
        .arg(&script)
        .arg(binary("pitcrew"))
        .args(words)
        .env("PITCREW_STATE_DIR", &fx.state)
        .env_remove("PITCREW_ENGINE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

#[test]
fn completion_offers_a_kept_sandboxs_id() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = LocalFixture::new("echo ran", 1, "", false);
    let doc = pitcrew_run(&fx.harness, &fx.state, &["--keep"], &[]);
    let id = doc["sandbox"].as_str().unwrap().to_string();
    let listed = ok(&fx, &["__complete-sandboxes", "--engine", "local"]);
    assert_eq!(listed, format!("{id}\n"));
    for words in [
        vec!["logs", ""],
        vec!["rm", &id[..4]],
        vec!["inspect", "--json", ""],
        vec!["run", "h.yaml", "--sandbox", ""],
        vec!["run", "--resume", ""],
    ] {
        let got = bash_complete(&fx, &words);
        // Other engines here may have sandboxes of their own: this one is among them.
        assert!(got.contains(&id), "{words:?}: {got:?}");
        assert!(
            got.iter().all(|g| !g.starts_with('-')),
            "{words:?}: {got:?}"
        );
    }
    // Its second argument is no sandbox.
    let got = bash_complete(&fx, &["collect", &id, ""]);
    assert!(!got.contains(&id), "{got:?}");
    ok(&fx, &["down", &id]);
}
