//! `pitcrew batch` on the local engine, end to end: 24 jobs of one harness at concurrency 6,
//! each with its own workspace and `TASK`; two whose agent fails, and one whose sandbox is
//! killed from outside while its agent runs. The failures are the agents' own (not retried), the
//! killed job is retried in a new sandbox and succeeds, nothing is left running, and `--resume`
//! on the finished batch starts nothing.
//!
//! Needs root and PID namespaces; skipped otherwise, or a failure with `PITCREW_REQUIRE_E2E=1`.

use pitcrew_e2e::{binary, read_json, require_pid_namespaces};
use serde_json::Value;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The agent: the victim (its workspace has `slow`) waits in `sleep 7777` until the host puts
/// `fast` into its workspace, which only a new upload (the retry) brings; `TASK=fail` fails.
const AGENT: &str = r#"if [ -e slow ] && [ ! -e fast ]; then sleep 7777; fi; echo "task $TASK"; [ "$TASK" != fail ]"#;

/// Every live process's pid and command line.
fn processes() -> Vec<(i32, String)> {
    fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let cmd = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            Some((pid, String::from_utf8_lossy(&cmd).replace('\0', " ")))
        })
        .collect()
}

fn parent(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].split(' ').nth(1)?.parse().ok()
}

/// A batch directory reachable by the agent's uid: a harness of `runtime: command` whose agent
/// is `sh -c AGENT` (plugin `p`, workspace `w`, timeout 120 s), the jobs file `jobs`, and an
/// empty state directory for the local engine (returned with the temporary directory).
fn fixture(agent: &str, jobs: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
    fs::create_dir_all(dir.join("p")).unwrap();
    fs::write(dir.join("p/index.js"), "module.exports = () => {};\n").unwrap();
    fs::create_dir_all(dir.join("w")).unwrap();
    let quoted = serde_json::to_string(agent).unwrap();
    fs::write(
        dir.join("harness.yaml"),
        format!("runtime: command\ncommand: [/bin/sh, -c, {quoted}]\nplugins:\n  - path: p\nworkdir: w\ntimeout: 120s\n"),
    )
    .unwrap();
    fs::write(dir.join("jobs.jsonl"), jobs).unwrap();
    let state = dir.join("state");
    fs::create_dir(&state).unwrap();
    (tmp, state)
}

/// Job lines `{"id": "<prefix>N", "harness": "harness.yaml", "workspace": "tasks/N", "env":
/// {"TASK": task(N)}}` for N in `range`, each workspace made with `files(N)` (name, content).
fn jobs_with_workspaces(
    dir: &Path,
    prefix: &str,
    range: std::ops::RangeInclusive<u32>,
    task: impl Fn(u32) -> String,
    files: impl Fn(u32) -> Vec<(String, String)>,
) -> String {
    let mut jobs = String::new();
    for n in range {
        let ws = dir.join(format!("tasks/{n}"));
        fs::create_dir_all(&ws).unwrap();
        for (name, body) in files(n) {
            fs::write(ws.join(name), body).unwrap();
        }
        jobs.push_str(&format!(
            "{{\"id\":\"{prefix}{n}\",\"harness\":\"harness.yaml\",\"workspace\":\"tasks/{n}\",\"env\":{{\"TASK\":\"{}\"}}}}\n",
            task(n)
        ));
    }
    jobs
}

/// No sandbox in the local engine's `state`, and no process whose command line is `cmd`.
fn nothing_left(state: &Path, cmd: &str) {
    let ps = Command::new(binary("pitcrew"))
        .args(["ps", "--engine", "local", "--json", "--state-dir"])
        .arg(state)
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&ps.stdout).unwrap();
    assert_eq!(listed, serde_json::json!([]), "{listed:#}");
    assert!(processes().iter().all(|(_, c)| cmd.is_empty() || c != cmd));
}

fn batch(dir: &Path, state: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(binary("pitcrew"));
    cmd.arg("batch")
        .arg(dir.join("jobs.jsonl"))
        .args(["--engine", "local", "--json", "--state-dir"])
        .arg(state)
        .args(extra)
        .stdin(Stdio::null());
    cmd
}

#[test]
fn a_batch_runs_every_job_retries_a_killed_sandbox_and_resumes_to_nothing() {
    if !require_pid_namespaces() {
        return;
    }
    let (tmp, state) = fixture(AGENT, "");
    let dir = tmp.path();
    let jobs = jobs_with_workspaces(
        dir,
        "t",
        1..=24,
        |n| {
            if n == 5 || n == 11 {
                "fail".into()
            } else {
                n.to_string()
            }
        },
        |n| {
            let mut files = vec![("task.txt".to_string(), format!("{n}\n"))];
            if n == 17 {
                files.push(("slow".into(), String::new()));
            }
            files
        },
    );
    fs::write(dir.join("jobs.jsonl"), jobs).unwrap();

    let child = batch(dir, &state, &["--concurrency", "6"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The victim's agent waits; give its workspace `fast` for the retry, then kill its
    // sandbox's supervisor from outside.
    let deadline = Instant::now() + Duration::from_secs(120);
    let sleeper = loop {
        if let Some((pid, _)) = processes().into_iter().find(|(_, c)| c == "sleep 7777 ") {
            break pid;
        }
        assert!(Instant::now() < deadline, "the victim's agent never ran");
        std::thread::sleep(Duration::from_millis(50));
    };
    fs::write(dir.join("tasks/17/fast"), "").unwrap();
    let mut at = sleeper;
    let supervisor = loop {
        at = parent(at).expect("the supervisor above the victim's agent");
        let cmd = fs::read(format!("/proc/{at}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains("pitcrew-init") {
            break at;
        }
    };
    // SAFETY: kill takes integers; the pid is the victim's supervisor, alive (its child runs).
    assert_eq!(unsafe { libc::kill(supervisor, libc::SIGKILL) }, 0);

    let out = child.wait_with_output().unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{doc:#}\n{stderr}");
    let counts = &doc["counts"];
    assert_eq!(counts["succeeded"], 22, "{doc:#}");
    assert_eq!(counts["failed"], 2, "{doc:#}");
    assert_eq!(counts["infrastructure"], 0, "{doc:#}");
    let jobs = doc["jobs"].as_array().unwrap();
    for job in jobs {
        let id = job["id"].as_str().unwrap();
        let attempts = job["attempts"].as_array().unwrap();
        match id {
            // The agents' own failures: reported with their exit code, never retried.
            "t5" | "t11" => {
                assert_eq!(job["status"], "failed", "{job:#}");
                assert_eq!(job["exit_code"], 1, "{job:#}");
                assert_eq!(attempts.len(), 1, "{job:#}");
            }
            // Killed mid-run: an infrastructure failure, retried in a new sandbox.
            "t17" => {
                assert_eq!(job["status"], "succeeded", "{job:#}");
                assert_eq!(attempts.len(), 2, "{job:#}");
                assert_eq!(attempts[0]["end"], "infrastructure", "{job:#}");
                assert_eq!(attempts[1]["end"], "completed", "{job:#}");
                assert_ne!(attempts[0]["sandbox"], attempts[1]["sandbox"]);
            }
            _ => {
                assert_eq!(job["status"], "succeeded", "{job:#}");
                assert_eq!(attempts.len(), 1, "{job:#}");
            }
        }
        // Each job's record: its own workspace and TASK.
        let run_dir = Path::new(job["run_dir"].as_str().unwrap());
        let record = read_json(&run_dir.join("iteration-1/result.json"));
        let n = id.trim_start_matches('t');
        let output = fs::read_to_string(run_dir.join("iteration-1/output.jsonl")).unwrap();
        let task = if n == "5" || n == "11" { "fail" } else { n };
        assert!(
            output.contains(&format!("task {task}")),
            "{id}: {output}\n{record:#}"
        );
    }

    // Nothing left running: the killed sandbox is stopped with its state kept (its supervisor
    // died: records and log are evidence), deleted only by `down --force`; no other sandbox in
    // the state, no agent process.
    let victim = jobs.iter().find(|j| j["id"] == "t17").unwrap()["attempts"][0]["sandbox"]
        .as_str()
        .unwrap()
        .to_string();
    let ps = Command::new(binary("pitcrew"))
        .args(["ps", "--engine", "local", "--json", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&ps.stdout).unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed:#}");
    assert_eq!(listed[0]["id"], victim.as_str(), "{listed:#}");
    assert_eq!(listed[0]["running"], false, "{listed:#}");
    let down = Command::new(binary("pitcrew"))
        .args(["down", &victim, "--force", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(down.status.success(), "{down:?}");
    nothing_left(&state, "sleep 7777 ");

    // Resumed, the finished batch starts nothing: every job is taken from its record.
    let before = fs::read_dir(dir.join("jobs.batch/t17")).unwrap().count();
    let again = batch(dir, &state, &["--resume"]).output().unwrap();
    let doc: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(again.status.code(), Some(1), "{doc:#}");
    assert_eq!(doc["counts"]["skipped"], 24, "{doc:#}");
    assert!(doc["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|j| j["skipped"] == true));
    assert_eq!(
        fs::read_dir(dir.join("jobs.batch/t17")).unwrap().count(),
        before
    );

    // And without --resume an existing batch is refused.
    let refused = batch(dir, &state, &[]).output().unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--resume continues it"),
        "{refused:?}"
    );
}

#[test]
fn sigterm_to_a_batch_starts_nothing_more_and_cancels_and_cleans_up_the_running_jobs() {
    if !require_pid_namespaces() {
        return;
    }
    let jobs: String = (1..=6)
        .map(|n| format!("{{\"id\":\"s{n}\",\"harness\":\"harness.yaml\"}}\n"))
        .collect();
    let (tmp, state) = fixture("sleep 7778", &jobs);
    let dir = tmp.path();
    let child = batch(dir, &state, &["--concurrency", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while processes()
        .iter()
        .filter(|(_, c)| c == "sleep 7778 ")
        .count()
        < 2
    {
        assert!(Instant::now() < deadline, "the two first jobs never ran");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: kill takes integers; the pid is our own child, not yet waited for.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(130), "{doc:#}");
    assert_eq!(doc["interrupted"], true, "{doc:#}");
    assert_eq!(doc["counts"]["cancelled"], 6, "{doc:#}");
    let jobs = doc["jobs"].as_array().unwrap();
    // The two running were cancelled by their run (reported, records collected); the other
    // four never started.
    let ran: Vec<&Value> = jobs
        .iter()
        .filter(|j| !j["attempts"].as_array().unwrap().is_empty())
        .collect();
    assert_eq!(ran.len(), 2, "{doc:#}");
    for job in ran {
        assert_eq!(job["attempts"][0]["end"], "cancelled", "{job:#}");
        let run_dir = Path::new(job["run_dir"].as_str().unwrap());
        let record = read_json(&run_dir.join("iteration-1/result.json"));
        assert!(
            record["reason"]
                .as_str()
                .unwrap_or_default()
                .starts_with("cancelled"),
            "{record:#}"
        );
    }
    nothing_left(&state, "sleep 7778 ");
}

#[test]
fn with_reuse_each_worker_keeps_one_sandbox_and_every_job_gets_its_own_workspace() {
    if !require_pid_namespaces() {
        return;
    }
    let (tmp, state) = fixture(
        "echo files: only-*; echo task $TASK; touch left-by-$TASK",
        "",
    );
    let dir = tmp.path();
    let jobs = jobs_with_workspaces(
        dir,
        "r",
        1..=6,
        |n| n.to_string(),
        |n| vec![(format!("only-{n}"), String::new())],
    );
    fs::write(dir.join("jobs.jsonl"), jobs).unwrap();
    let out = batch(dir, &state, &["--concurrency", "2", "--reuse"])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{doc:#}");
    assert_eq!(doc["reuse"], true);
    let mut sandboxes = std::collections::BTreeSet::new();
    for job in doc["jobs"].as_array().unwrap() {
        let n = job["id"].as_str().unwrap().trim_start_matches('r');
        sandboxes.insert(job["attempts"][0]["sandbox"].as_str().unwrap().to_string());
        // The one iteration of this job (numbers go on in a reused sandbox).
        let run_dir = Path::new(job["run_dir"].as_str().unwrap());
        let it = fs::read_dir(run_dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .find(|e| e.file_name().to_string_lossy().starts_with("iteration-"))
            .unwrap()
            .path();
        let output = fs::read_to_string(it.join("output.jsonl")).unwrap();
        // Its own workspace, replaced: no file of an earlier job in the same sandbox.
        assert!(
            output.contains(&format!("files: only-{n}\n")),
            "{n}: {output}"
        );
        assert!(output.contains(&format!("task {n}\n")), "{n}: {output}");
    }
    assert_eq!(sandboxes.len(), 2, "{sandboxes:?}");
    // The pool is brought down at the end.
    nothing_left(&state, "");
}

#[test]
fn quiet_batch_prints_its_batch_directory_alone() {
    if !require_pid_namespaces() {
        return;
    }
    let (tmp, state) = fixture(
        "echo done",
        "{\"id\": \"q1\", \"harness\": \"harness.yaml\"}\n{\"id\": \"q2\", \"harness\": \"harness.yaml\"}\n",
    );
    let dir = tmp.path();
    let out = Command::new(binary("pitcrew"))
        .arg("batch")
        .arg(dir.join("jobs.jsonl"))
        .args(["-q", "--engine", "local", "--state-dir"])
        .arg(&state)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    // Only the batch directory: no table, no summary, no progress.
    let batch_dir = dir.join("jobs.batch");
    assert_eq!(stdout, format!("{}\n", batch_dir.display()), "{stderr}");
    assert!(!stderr.contains("job q1"), "{stderr}");
    let doc = read_json(&batch_dir.join("batch.json"));
    assert_eq!(doc["counts"]["succeeded"], 2, "{doc:#}");
    nothing_left(&state, "");
}

#[test]
fn a_jobs_file_with_several_problems_names_each_on_its_own_line_and_its_format() {
    // Read before any sandbox is made: no root needed.
    let (tmp, state) = fixture("true", "");
    let jobs = tmp.path().join("jobs.yaml");
    fs::write(&jobs, "- harness: harness.yaml\n  prompt: fix it\n").unwrap();
    let run = |json: bool| {
        let mut cmd = Command::new(binary("pitcrew"));
        cmd.arg("batch")
            .arg(&jobs)
            .args(["--engine", "local", "--state-dir"]);
        cmd.arg(&state).stdin(Stdio::null());
        if json {
            cmd.arg("--json");
        }
        cmd.output().unwrap()
    };
    let out = run(false);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let file = jobs.display().to_string();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 3, "{stderr}");
    assert_eq!(
        lines[0],
        format!("pitcrew: {file}:1: column 2: invalid number"),
        "{stderr}"
    );
    assert!(
        lines[1].starts_with(&format!("pitcrew: {file}:2: ")),
        "{stderr}"
    );
    assert!(
        lines[2].contains("the jobs file is JSON lines, one object per line"),
        "{stderr}"
    );
    assert!(!stderr.contains("\\n"), "{stderr}");
    // `--json`: the same problems as an array on stdout.
    let out = run(true);
    assert!(!out.status.success());
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["kind"], "problems", "{doc:#}");
    let problems = doc["error"]["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 3, "{doc:#}");
    assert_eq!(problems[0], format!("{file}:1: column 2: invalid number"));
}

#[test]
fn batch_help_names_the_jobs_format_and_a_jsonl_example() {
    let out = Command::new(binary("pitcrew"))
        .args(["batch", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{help}");
    assert!(help.contains("JSON lines, one job per line"), "{help}");
    assert!(help.contains("pitcrew batch jobs.jsonl"), "{help}");
    assert!(!help.contains("jobs.yaml"), "{help}");
}
