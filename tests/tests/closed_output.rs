//! `pitcrew` whose stdout or stderr is closed under it (`pitcrew … | head`, a reader that
//! crashed, `2>&-`): no panic, exit 141, and a run or batch that drives a sandbox cancels as on
//! SIGTERM (the running iteration cancelled and collected, the iterations before it where they
//! belong, the sandbox stopped), instead of dying and leaving the sandbox `orphaned`.
//!
//! The commands that drive a sandbox need root and PID namespaces; skipped otherwise, or a
//! failure with `PITCREW_REQUIRE_E2E=1`. The commands that only print need nothing.

use pitcrew_e2e::{binary, busy_wait, read_json, require_pid_namespaces, LocalFixture};
use serde_json::Value;
use std::fs::{self, File};
use std::io::{BufRead as _, BufReader};
use std::os::fd::{FromRawFd as _, OwnedFd};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// The exit code of a `pitcrew` that found an output closed (docs/troubleshooting.md).
const GONE: i32 = 141;

/// A pipe: its reading end and its writing end, both close-on-exec (a child gets the writing
/// end only as the stdout or stderr it is given).
fn pipe() -> (File, File) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two new descriptors into `fds` and touches nothing else.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors were just created and are owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    (File::from(r), File::from(w))
}

/// The writing end of a pipe whose reader is already gone.
fn closed_pipe() -> File {
    let (reader, writer) = pipe();
    drop(reader);
    writer
}

/// Waits for `child` to exit, at most `secs` seconds.
fn wait(child: &mut Child, secs: u64) -> ExitStatus {
    let mut status = None;
    let ended = busy_wait(Duration::from_secs(secs), || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if !ended {
        let _ = child.kill();
        panic!("pitcrew did not exit within {secs} s of its output closing");
    }
    status.unwrap()
}

/// No sandbox left in the local engine's `state` (none running, none `orphaned`).
fn no_sandbox_left(state: &Path) {
    let ps = Command::new(binary("pitcrew"))
        .args(["ps", "--engine", "local", "--json", "--state-dir"])
        .arg(state)
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&ps.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&ps.stderr)));
    assert_eq!(listed, serde_json::json!([]), "{listed:#}");
    let sandboxes = state.join("sandboxes");
    let left = fs::read_dir(&sandboxes).map_or(0, Iterator::count);
    assert_eq!(
        left,
        0,
        "{} still holds a sandbox's state",
        sandboxes.display()
    );
}

/// The one run directory below `runs`.
fn the_run_dir(runs: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = fs::read_dir(runs)
        .unwrap_or_else(|e| panic!("{}: {e}", runs.display()))
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs.into_iter().next().unwrap()
}

/// A run cancelled because an output closed: `run.json` says so, and every iteration it lists
/// has its record collected where it belongs.
fn cancelled_run(run_dir: &Path) -> Value {
    let doc = read_json(&run_dir.join("run.json"));
    assert_eq!(doc["stopped"], "cancelled", "{doc:#}");
    assert_eq!(doc["exit_code"], GONE, "{doc:#}");
    for row in doc["iterations"].as_array().unwrap() {
        let n = row["iteration"].as_u64().unwrap();
        let record = read_json(&run_dir.join(format!("iteration-{n}/result.json")));
        assert_eq!(record["exit_code"], row["exit_code"], "{record:#}");
    }
    doc
}

/// Copies `from` into `to`, directories 0755 (reachable by the agent's uid).
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    fs::set_permissions(to, fs::Permissions::from_mode(0o755)).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        // Records of earlier runs of the example are not part of it.
        if entry.file_name() == "runs" {
            continue;
        }
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &dest);
        } else {
            fs::copy(entry.path(), &dest).unwrap();
        }
    }
}

/// The repository's `examples/quickstart`.
fn quickstart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/quickstart")
}

#[test]
fn the_quickstart_run_v_into_head_2_exits_141_and_leaves_no_sandbox() {
    if !require_pid_namespaces() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let root = tmp.path().join("quickstart");
    copy_tree(&quickstart(), &root);
    let state = tmp.path().join("state");
    fs::create_dir(&state).unwrap();
    // `pitcrew run -v harness.yaml 2>&1 | head -2`.
    let (reader, writer) = pipe();
    let mut child = Command::new(binary("pitcrew"))
        .args(["run", "-v"])
        .arg(root.join("harness.yaml"))
        .arg("--state-dir")
        .arg(&state)
        .stdin(Stdio::null())
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(reader).lines();
    let head: Vec<String> = lines.by_ref().take(2).map(Result::unwrap).collect();
    drop(lines);
    // The panic said itself on the closed pipe: its exit code, 101, is what shows it.
    let status = wait(&mut child, 120);
    assert_eq!(status.code(), Some(GONE), "{status:?} after {head:?}");
    no_sandbox_left(&state);
    cancelled_run(&the_run_dir(&root.join("runs")));
}

/// The agent of the mid-run tests: iteration 1 ends at once, iteration 2 runs until cancelled.
const SECOND_RUNS_ON: &str =
    "if [ -e first-done ]; then touch running; while :; do echo tick; sleep 0.1; done; fi\ntouch first-done\necho first";

#[test]
fn a_run_whose_stdout_reader_goes_away_mid_iteration_cancels_collects_and_exits_141() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = LocalFixture::new(SECOND_RUNS_ON, 3, "", false);
    let (reader, writer) = pipe();
    let stderr = fx.root.join("stderr.log");
    let h = fx.harness.to_str().unwrap();
    let mut child = fx
        .pitcrew(&["run", h, "-v", "--json"])
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let id = fx.wait_sandbox();
    let ws = fx.sandbox_dir(&id).join("root/workspace");
    assert!(
        busy_wait(Duration::from_secs(60), || ws.join("running").exists()),
        "iteration 2 never started: {}",
        fs::read_to_string(&stderr).unwrap_or_default()
    );
    // Nothing was printed on stdout yet (the report comes at the end): its reader goes away.
    drop(reader);
    let status = wait(&mut child, 60);
    let said = fs::read_to_string(&stderr).unwrap();
    assert_eq!(status.code(), Some(GONE), "{said}");
    assert!(!said.contains("panicked"), "{said}");
    assert!(
        said.contains("stdout or stderr closed; cancelling the iteration"),
        "{said}"
    );
    no_sandbox_left(&fx.state);
    // Iteration 1 completed, iteration 2 was cancelled and collected; no third started.
    let run_dir = the_run_dir(&fx.root.join("runs"));
    let doc = cancelled_run(&run_dir);
    assert_eq!(doc["iterations"].as_array().unwrap().len(), 2, "{doc:#}");
    let first = read_json(&run_dir.join("iteration-1/result.json"));
    assert_eq!(first["exit_code"], 0, "{first:#}");
    let second = read_json(&run_dir.join("iteration-2/result.json"));
    assert_eq!(second["exit_code"], 143, "{second:#}");
    assert!(
        second["reason"]
            .as_str()
            .unwrap_or_default()
            .starts_with("cancelled"),
        "{second:#}"
    );
    assert!(!run_dir.join("iteration-3").exists());
}

#[test]
fn a_run_whose_stdout_and_stderr_pipe_closes_after_two_lines_of_iteration_2_cancels_it() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = LocalFixture::new(SECOND_RUNS_ON, 3, "", false);
    // `pitcrew run -v … 2>&1 | …` whose reader reads into iteration 2, then exits.
    let (reader, writer) = pipe();
    let h = fx.harness.to_str().unwrap();
    let mut child = fx
        .pitcrew(&["run", h, "-v"])
        .stdin(Stdio::null())
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(reader).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let tick = line == "tick";
        seen.push(line);
        if tick {
            break;
        }
    }
    seen.extend(lines.by_ref().take(1).map(Result::unwrap));
    drop(lines);
    let status = wait(&mut child, 60);
    assert_eq!(status.code(), Some(GONE), "{status:?} after {seen:#?}");
    assert!(
        seen.iter()
            .any(|l| l.starts_with("pitcrew: iteration 1: exit 0")),
        "{seen:#?}"
    );
    no_sandbox_left(&fx.state);
    let run_dir = the_run_dir(&fx.root.join("runs"));
    let doc = cancelled_run(&run_dir);
    assert_eq!(doc["iterations"].as_array().unwrap().len(), 2, "{doc:#}");
    assert_eq!(doc["iterations"][0]["exit_code"], 0, "{doc:#}");
    assert_eq!(doc["iterations"][1]["exit_code"], 143, "{doc:#}");
}

#[test]
fn a_run_with_stderr_on_a_closed_pipe_ends_before_its_first_iteration_with_141() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = LocalFixture::new("touch ran", 2, "", false);
    let h = fx.harness.to_str().unwrap();
    let out = fx
        .pitcrew(&["run", h, "-v", "--json"])
        .stdin(Stdio::null())
        .stderr(closed_pipe())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(GONE), "{stdout}");
    assert!(!stdout.contains("panicked"), "{stdout}");
    // Its first progress line found stderr closed: the run ended before an iteration started,
    // and the report still came on stdout.
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["stopped"], "cancelled", "{doc:#}");
    assert_eq!(doc["exit_code"], GONE, "{doc:#}");
    assert_eq!(doc["iterations"], serde_json::json!([]), "{doc:#}");
    no_sandbox_left(&fx.state);
}

#[test]
fn a_run_with_stderr_closed_runs_to_its_end() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = LocalFixture::new("echo hello", 2, "", false);
    let h = fx.harness.to_str().unwrap();
    // `pitcrew run -v … 2>&-`: started without a descriptor 2 (Rust puts /dev/null there).
    let mut args = vec!["-c", "exec \"$0\" \"$@\" 2>&-"];
    let pitcrew = binary("pitcrew");
    let state = fx.state.to_str().unwrap();
    args.extend([pitcrew.to_str().unwrap(), "run", h, "-v", "--json"]);
    args.extend(["--state-dir", state]);
    let out = Command::new("/bin/sh")
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["stopped"], "iterations", "{doc:#}");
    assert_eq!(doc["iterations"].as_array().unwrap().len(), 2, "{doc:#}");
    no_sandbox_left(&fx.state);
}

#[test]
fn a_batch_whose_stdout_reader_goes_away_cancels_its_running_job_and_exits_141() {
    if !require_pid_namespaces() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
    fs::create_dir_all(dir.join("p")).unwrap();
    fs::write(dir.join("p/index.js"), "module.exports = () => {};\n").unwrap();
    for (task, files) in [("quick", &[][..]), ("slow", &["slow"][..])] {
        let ws = dir.join("tasks").join(task);
        fs::create_dir_all(&ws).unwrap();
        for f in files {
            fs::write(ws.join(f), "").unwrap();
        }
    }
    let agent = "if [ -e slow ]; then touch running; sleep 7779; fi; echo done";
    fs::write(
        dir.join("harness.yaml"),
        format!(
            "runtime: command\ncommand: [/bin/sh, -c, {}]\nplugins:\n  - path: p\nworkdir: tasks/quick\ntimeout: 120s\n",
            serde_json::to_string(agent).unwrap()
        ),
    )
    .unwrap();
    fs::write(
        dir.join("jobs.jsonl"),
        "{\"id\":\"a\",\"harness\":\"harness.yaml\",\"workspace\":\"tasks/quick\"}\n\
         {\"id\":\"b\",\"harness\":\"harness.yaml\",\"workspace\":\"tasks/slow\"}\n",
    )
    .unwrap();
    let state = dir.join("state");
    fs::create_dir(&state).unwrap();
    let (reader, writer) = pipe();
    let stderr = dir.join("stderr.log");
    let mut child = Command::new(binary("pitcrew"))
        .arg("batch")
        .arg(dir.join("jobs.jsonl"))
        .args(["--engine", "local", "--concurrency", "1", "--state-dir"])
        .arg(&state)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    // Job b's agent runs once job a is done; then the reader of the batch's stdout goes away.
    let running = |s: &Path| -> bool {
        fs::read_dir(s.join("sandboxes")).is_ok_and(|mut d| {
            d.any(|e| e.is_ok_and(|e| e.path().join("root/workspace/running").exists()))
        })
    };
    assert!(
        busy_wait(Duration::from_secs(90), || running(&state)),
        "job b never ran: {}",
        fs::read_to_string(&stderr).unwrap_or_default()
    );
    drop(reader);
    let status = wait(&mut child, 90);
    let said = fs::read_to_string(&stderr).unwrap();
    assert_eq!(status.code(), Some(GONE), "{said}");
    assert!(!said.contains("panicked"), "{said}");
    assert!(
        said.contains("stdout or stderr closed: starting no more jobs"),
        "{said}"
    );
    no_sandbox_left(&state);
    // Job a's records where they belong; job b cancelled by its run, its iteration collected.
    let batch = dir.join("jobs.batch");
    assert_eq!(read_json(&batch.join("batch.json"))["interrupted"], true);
    let a = read_json(&batch.join("a/job.json"));
    assert_eq!(a["status"], "succeeded", "{a:#}");
    let a_run = PathBuf::from(a["run_dir"].as_str().unwrap());
    assert_eq!(
        read_json(&a_run.join("iteration-1/result.json"))["exit_code"],
        0
    );
    let b = read_json(&batch.join("b/job.json"));
    assert_eq!(b["status"], "cancelled", "{b:#}");
    assert_eq!(b["attempts"][0]["end"], "cancelled", "{b:#}");
    let b_run = PathBuf::from(b["run_dir"].as_str().unwrap());
    let record = read_json(&b_run.join("iteration-1/result.json"));
    assert!(
        record["reason"]
            .as_str()
            .unwrap_or_default()
            .starts_with("cancelled"),
        "{record:#}"
    );
}

/// `pitcrew ARGS` with stdout on a pipe whose reader is gone: exit 141, no panic on stderr.
fn prints_into_a_closed_pipe(args: &[&str], state: Option<&Path>) {
    let mut cmd = Command::new(binary("pitcrew"));
    cmd.args(args);
    if let Some(state) = state {
        cmd.arg("--state-dir").arg(state);
    }
    let out = cmd
        .stdin(Stdio::null())
        .stdout(closed_pipe())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(GONE), "pitcrew {args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "pitcrew {args:?}: {stderr}");
    assert!(
        !stderr.contains("Broken pipe"),
        "pitcrew {args:?}: {stderr}"
    );
}

#[test]
fn ps_and_inspect_exit_141_without_a_panic_when_stdout_is_closed() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = LocalFixture::new("echo hello", 1, "", false);
    let h = fx.harness.to_str().unwrap();
    let kept = fx.output(&["run", h, "--json", "--keep"]);
    assert!(
        kept.status.success(),
        "{}",
        String::from_utf8_lossy(&kept.stderr)
    );
    let id = fx.wait_sandbox();
    let state = Some(fx.state.as_path());
    for args in [
        &["ps", "--engine", "local"][..],
        &["ps", "--engine", "local", "--json"],
        &["ps", "--engine", "local", "-q"],
        &["inspect", &id],
        &["inspect", &id, "--json"],
        &["inspect", &id, "--no-verify"],
    ] {
        prints_into_a_closed_pipe(args, state);
    }
    // The sandbox they looked at is as it was.
    assert_eq!(fx.sandboxes(), std::slice::from_ref(&id));
    let down = fx.output(&["down", &id]);
    assert!(down.status.success(), "{down:?}");
}

#[test]
fn printing_commands_exit_141_without_a_panic_when_stdout_or_stderr_is_closed() {
    let example = quickstart();
    let harness = example.join("harness.yaml");
    let harness = harness.to_str().unwrap();
    let plugin = example.join("plugins/hello");
    let plugin = plugin.to_str().unwrap();
    let project = example.to_str().unwrap();
    let state = tempfile::tempdir().unwrap();
    for args in [
        &["validate", harness][..],
        &["validate", harness, "--json"],
        &["validate", harness, "--emit-manifest"],
        &["hash", plugin],
        &["hash", plugin, "--json"],
        &["classify", plugin],
        &["discover", "--project", project],
        &["completions", "bash"],
        &["--help"],
        &["--version"],
    ] {
        prints_into_a_closed_pipe(args, None);
    }
    prints_into_a_closed_pipe(&["ps", "--engine", "local"], Some(state.path()));

    // Problems go to stderr: closed, they are not said, and no panic is either.
    let bad = state.path().join("bad.yaml");
    fs::write(&bad, "runtime: nonesuch\n").unwrap();
    let out = Command::new(binary("pitcrew"))
        .arg("validate")
        .arg(&bad)
        .stdin(Stdio::null())
        .stderr(closed_pipe())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(GONE),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
