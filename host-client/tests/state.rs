//! The local engine's host-side state against pid reuse: `engine.json` names a pid that, after
//! the sandbox died, the kernel gave to an unrelated process (here a `sleep` this test starts).
//! `pitcrew down` must never signal it and must say why; `pitcrew ps` must not call the sandbox
//! running. No namespaces needed: no sandbox is started.

// Tests that play an attacker are named `attack_<class>__<case>` (the security report's naming).
#![allow(non_snake_case)]

use serde_json::Value;
use std::fs;
use std::path::Path;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

/// A process standing in for the stranger that got the sandbox's pid; killed on drop.
struct Stranger(Child);

impl Stranger {
    fn start() -> Stranger {
        Stranger(Command::new("sleep").arg("300").spawn().unwrap())
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Stranger {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Field 22 of `/proc/<pid>/stat`.
fn start_time(pid: u32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, rest) = stat.rsplit_once(')').unwrap();
    rest.split_whitespace().nth(19).unwrap().parse().unwrap()
}

/// Writes `<state>/sandboxes/<id>/engine.json` for a sandbox whose process was `pid`
/// (started at `pid_start`, absent for state written by older versions), now gone.
fn state_for(state: &Path, id: &str, pid: u32, pid_start: Option<u64>) {
    let dir = state.join("sandboxes").join(id);
    fs::create_dir_all(dir.join("run")).unwrap();
    let mut rec = serde_json::json!({
        "engine": "local",
        "id": id,
        "pid": pid,
        "supervisor": "/nonexistent/pitcrew-init",
        "socket": dir.join("run/control.sock"),
        "records": dir.join("records"),
        "root": dir.join("root"),
        "created": 1,
    });
    if let Some(t) = pid_start {
        rec["pid_start"] = t.into();
    }
    fs::write(dir.join("engine.json"), rec.to_string()).unwrap();
}

fn pitcrew(state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pitcrew"))
        .args(args)
        .arg("--state-dir")
        .arg(state)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn attack_pid_reuse__down_never_signals_a_process_that_reused_the_pid() {
    let state = tempfile::tempdir().unwrap();
    let mut stranger = Stranger::start();
    let pid = stranger.pid();
    // The sandbox's process had this pid but started earlier than the process that has it now.
    let recorded = start_time(pid) - 1;
    state_for(state.path(), "pc-reused", pid, Some(recorded));
    let started = Instant::now();
    let out = pitcrew(state.path(), &["down", "pc-reused"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stranger.alive(), "down signalled pid {pid}: {stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "down waited on a stranger"
    );
    assert!(
        stderr.contains(&format!("pid {pid} is another process now"))
            && stderr.contains(&format!("the sandbox's started at {recorded}"))
            && stderr.contains("not signalled"),
        "{stderr}"
    );
    assert!(
        stdout.contains("sandbox pc-reused: not running"),
        "{stdout}"
    );
    // The sandbox is gone; its state went with `down`.
    assert!(!state.path().join("sandboxes/pc-reused").exists());
}

#[test]
fn attack_pid_reuse__ps_shows_a_sandbox_whose_pid_was_reused_as_stale() {
    let state = tempfile::tempdir().unwrap();
    let mut stranger = Stranger::start();
    let pid = stranger.pid();
    state_for(state.path(), "pc-reused", pid, Some(start_time(pid) + 1000));
    let out = pitcrew(state.path(), &["ps"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let line = stdout
        .lines()
        .find(|l| l.starts_with("pc-reused"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.contains("  stale  "), "{line}");
    assert!(
        line.contains(&format!("pid {pid} is another process now")),
        "{line}"
    );
    let out = pitcrew(state.path(), &["ps", "--json"]);
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list[0]["running"], false, "{list}");
    assert_eq!(list[0]["state"], "stale", "{list}");
    assert!(stranger.alive());
}

#[test]
fn attack_pid_reuse__a_pid_recorded_without_its_start_time_is_never_signalled() {
    // State written by an older pitcrew: a pid alone, and a live process has it.
    let state = tempfile::tempdir().unwrap();
    let mut stranger = Stranger::start();
    let pid = stranger.pid();
    state_for(state.path(), "pc-old", pid, None);
    let out = pitcrew(state.path(), &["ps", "--json"]);
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list[0]["state"], "unverified", "{list}");
    assert_eq!(list[0]["running"], false, "{list}");
    let started = Instant::now();
    let out = pitcrew(state.path(), &["down", "pc-old", "--keep"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stranger.alive(), "down signalled pid {pid}: {stderr}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        stderr.contains(&format!("pid {pid} is unverified"))
            && stderr.contains("records no start time")
            && stderr.contains("not signalled"),
        "{stderr}"
    );
    // --keep: the state stays for reading.
    assert!(state.path().join("sandboxes/pc-old/engine.json").is_file());
}

#[test]
fn a_sandbox_whose_process_is_gone_is_stopped_and_down_removes_it_quietly() {
    let state = tempfile::tempdir().unwrap();
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    state_for(state.path(), "pc-gone", pid, Some(1));
    let out = pitcrew(state.path(), &["ps", "--json"]);
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    // (Unless the pid was reused already: then it is stale, which is also not running.)
    assert_eq!(list[0]["running"], false, "{list}");
    let out = pitcrew(state.path(), &["down", "pc-gone"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!state.path().join("sandboxes/pc-gone").exists());
}
