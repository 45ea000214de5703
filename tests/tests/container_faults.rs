//! A container sandbox whose supervisor dies (`<engine> kill --signal KILL`: PID 1 is
//! `pitcrew-init`, so the container stops with it), end to end with `--engine podman|docker`:
//! the container stays, stopped, with its records; the host says the supervisor died and how
//! (its exit code, its log); `ps` shows it, `down` keeps it and says why (the uncollected
//! iterations, or the log), `collect` copies a record out of the stopped container, and
//! `down --force` removes it with its volumes. A container `down` stopped (not killed) holding
//! an uncollected record goes with `collect` then `down`. The same faults for the local engine are in
//! `faults.rs`.
//!
//! Needs root, podman, and for docker `dockerd` (a private daemon per test, as in
//! `engines.rs`); skipped otherwise, or a failure with `PITCREW_REQUIRE_E2E=1`.

use pitcrew_e2e::engines::{self, Engine, Kind};
use pitcrew_e2e::{binary, busy_wait, read_json, read_text, write_command_harness};
use serde_json::Value;
use std::fs;
use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The records directory inside a sandbox container.
const RECORDS: &str = "/var/lib/pitcrew/records";

/// A harness directory the agent's uid can read, a private state and temporary directory for
/// `pitcrew`, and the engine's environment.
struct Fixture<'e> {
    engine: &'e Engine,
    dir: tempfile::TempDir,
    harness: PathBuf,
}

impl<'e> Fixture<'e> {
    fn new(engine: &'e Engine, script: &str, iterations: u32) -> Fixture<'e> {
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let harness = write_command_harness(dir.path(), script, iterations, "60s", false, "");
        for sub in ["state", "tmp"] {
            fs::create_dir(dir.path().join(sub)).unwrap();
        }
        Fixture {
            engine,
            dir,
            harness,
        }
    }

    /// `pitcrew <args…>` with the engine's environment, a private local state directory and a
    /// private `TMPDIR` (where a record copied out of a container is staged).
    fn pitcrew(&self, args: &[&str]) -> Command {
        let mut c = self.engine.command(binary("pitcrew"));
        c.args(args)
            .env("PITCREW_STATE_DIR", self.dir.path().join("state"))
            .env("TMPDIR", self.dir.path().join("tmp"));
        c
    }

    fn output(&self, args: &[&str]) -> Output {
        self.pitcrew(args).output().unwrap()
    }

    /// Starts `pitcrew run` of the harness in a new sandbox of the engine, with `extra`.
    fn run(&self, image: &str, extra: &[&str], env: &[(&str, &str)]) -> Run {
        let mut args = vec!["run", self.harness.to_str().unwrap(), "--json"];
        args.extend(["--engine", self.engine.kind.name(), "--image", image]);
        args.extend_from_slice(extra);
        let mut child = self
            .pitcrew(&args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let said = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&said);
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        Run {
            child: Some(child),
            said,
        }
    }

    /// `pitcrew ps --engine E --json`'s entry of sandbox `id`.
    fn ps_entry(&self, id: &str) -> Value {
        let out = self.output(&["ps", "--engine", self.engine.kind.name(), "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let list: Value = serde_json::from_slice(&out.stdout).unwrap();
        list.as_array()
            .into_iter()
            .flatten()
            .find(|s| s["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} not in ps: {list:#}"))
    }

    /// Waits until the first run directory holds iteration 1's collected record.
    fn wait_first_collected(&self) -> PathBuf {
        let runs = self.dir.path().join("runs");
        let mut found = None;
        assert!(
            busy_wait(Duration::from_secs(60), || {
                found = fs::read_dir(&runs)
                    .into_iter()
                    .flatten()
                    .filter_map(Result::ok)
                    .map(|e| e.path().join("iteration-1"))
                    .find(|d| d.join("result.json").exists());
                found.is_some()
            }),
            "iteration 1 was never collected into {}",
            runs.display()
        );
        found.unwrap()
    }

    /// Whether the engine's TMPDIR for `pitcrew` holds nothing (no scratch copy was left).
    fn tmp_is_empty(&self) -> bool {
        fs::read_dir(self.dir.path().join("tmp"))
            .unwrap()
            .next()
            .is_none()
    }
}

/// A `pitcrew run` in progress, its stderr gathered; killed if the test fails first.
struct Run {
    child: Option<Child>,
    said: Arc<Mutex<String>>,
}

impl Run {
    /// The id of the sandbox it started (`pitcrew: sandbox ID (engine)`).
    fn sandbox(&self) -> String {
        let mut id = None;
        let found = busy_wait(Duration::from_secs(120), || {
            id = self.said.lock().unwrap().lines().find_map(|l| {
                let hex = l.strip_prefix("pitcrew: sandbox pc-")?.get(..8)?;
                hex.bytes()
                    .all(|b| b.is_ascii_hexdigit())
                    .then(|| format!("pc-{hex}"))
            });
            id.is_some()
        });
        assert!(found, "no sandbox started: {}", self.said.lock().unwrap());
        id.unwrap()
    }

    /// Waits for the run to end: its exit status and everything it said on stderr.
    fn finish(mut self) -> (std::process::ExitStatus, String) {
        let child = self.child.take().unwrap();
        let out = child.wait_with_output().unwrap();
        // The stderr reader ends with the process; give it a moment to take the last lines.
        std::thread::sleep(Duration::from_millis(100));
        let said = self.said.lock().unwrap().clone();
        (out.status, said)
    }

    /// Kills the host's `pitcrew run` (SIGKILL: nothing of it runs on).
    fn kill(mut self) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The sandbox's container, removed with its volumes when the test ends however it ends.
struct Sandbox<'e> {
    engine: &'e Engine,
    id: String,
}

impl Sandbox<'_> {
    /// The container's `.State.Status`, or `gone` when it does not exist.
    fn status(&self) -> String {
        let out = self.engine.cli(&[
            "inspect",
            "--type",
            "container",
            "--format",
            "{{.State.Status}}",
            &self.id,
        ]);
        if !out.status.success() {
            return "gone".into();
        }
        text(&out.stdout).trim().to_string()
    }

    /// Whether `path` exists inside the (running) container.
    fn has(&self, test: &str, path: &str) -> bool {
        self.engine
            .cli(&["exec", &self.id, "test", test, path])
            .status
            .success()
    }

    /// Kills the supervisor, PID 1, from the host and waits until the container has stopped.
    fn kill_supervisor(&self) {
        let out = self.engine.cli(&["kill", "--signal", "KILL", &self.id]);
        assert!(out.status.success(), "{out:?}");
        assert!(
            busy_wait(Duration::from_secs(20), || self.status() == "exited"),
            "{}",
            self.status()
        );
    }

    /// The names of the container's volumes.
    fn volumes(&self) -> Vec<String> {
        let out = self
            .engine
            .cli(&["inspect", "--type", "container", &self.id]);
        assert!(out.status.success(), "{out:?}");
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        doc[0]["Mounts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["Type"] == "volume")
            .map(|m| m["Name"].as_str().unwrap().to_string())
            .collect()
    }
}

impl Drop for Sandbox<'_> {
    fn drop(&mut self) {
        let _ = self.engine.cli(&["rm", "--force", "--volumes", &self.id]);
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `down` keeps the stopped container, then `down --force` removes it and its volumes.
fn down_keeps_then_force_removes(fx: &Fixture, sandbox: &Sandbox, kept_because: &str) {
    let volumes = sandbox.volumes();
    assert_eq!(volumes.len(), 2, "{volumes:?}");
    let out = fx.output(&["down", &sandbox.id]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(kept_because), "{stderr}");
    assert!(stderr.contains("--force"), "{stderr}");
    assert_eq!(sandbox.status(), "exited", "{stderr}");
    let out = fx.output(&["down", &sandbox.id, "--force"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(sandbox.status(), "gone");
    for v in &volumes {
        let left = fx.engine.cli(&["volume", "inspect", v]);
        assert!(!left.status.success(), "volume {v} is left");
    }
}

/// The supervisor is killed during iteration 2, once iteration 1 is collected: the run says it
/// died, how and what its log said last (the supervisor logs at info level), and keeps the
/// container; `ps` shows how it ended, `collect` copies iteration 1 out of the stopped
/// container, `down` keeps it for its log and `down --force` removes it.
fn killed_during_a_run(kind: Kind) {
    let engine = Engine::start(kind);
    let image = engine.image("pi");
    let fx = Fixture::new(&engine, "echo working; sleep 2", 3);
    let run = fx.run(&image, &["--pass-env", "RUST_LOG"], &[("RUST_LOG", "info")]);
    let sandbox = Sandbox {
        engine: &engine,
        id: run.sandbox(),
    };
    let id = sandbox.id.clone();
    let first = fx.wait_first_collected();
    sandbox.kill_supervisor();
    let (status, stderr) = run.finish();
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("the supervisor of sandbox {id} died")),
        "{stderr}"
    );
    assert!(
        stderr.contains("exited with code 137, killed by SIGKILL"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("`{} logs {id}` ends: ", kind.name())),
        "{stderr}"
    );
    assert!(stderr.contains("its state is kept"), "{stderr}");
    assert_eq!(sandbox.status(), "exited");

    let entry = fx.ps_entry(&id);
    assert_eq!(entry["state"], "stopped", "{entry:#}");
    assert_eq!(entry["detail"]["exit_code"], 137, "{entry:#}");
    assert_eq!(
        entry["detail"]["state_detail"], "its supervisor exited with code 137, killed by SIGKILL",
        "{entry:#}"
    );

    // `collect` finds the sandbox by its label, reads the record out of the stopped container
    // and says why; the scratch copy is gone afterwards.
    let into = fx.dir.path().join("collected");
    let out = fx.output(&[
        "collect",
        &id,
        "--iteration",
        "1",
        "--out",
        into.to_str().unwrap(),
    ]);
    let said = text(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("its supervisor died (its container exited with code 137"),
        "{said}"
    );
    assert!(
        said.contains("reading its record from its storage"),
        "{said}"
    );
    assert_eq!(
        read_json(&into.join("iteration-1/result.json"))["exit_code"],
        0
    );
    assert_eq!(
        read_text(&into.join("iteration-1/output.jsonl")),
        read_text(&first.join("output.jsonl"))
    );
    assert!(fx.tmp_is_empty());
    // Iteration 2 never finished: there is no record of it to read.
    let out = fx.output(&[
        "collect",
        &id,
        "--iteration",
        "2",
        "--out",
        into.to_str().unwrap(),
    ]);
    let said = text(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains(&format!("the supervisor of sandbox {id} died")),
        "{said}"
    );
    assert!(fx.tmp_is_empty());

    down_keeps_then_force_removes(&fx, &sandbox, "its supervisor died");
}

/// The host's `pitcrew run` dies during iteration 1, which the supervisor finishes and keeps
/// uncollected; then the supervisor is killed. `down` keeps the container and names the
/// iteration, `collect` (the latest record) copies it out of the stopped container and notes it
/// there as collected, `down` still keeps it for the log of a supervisor that died, and `down
/// --force` removes it.
fn killed_holding_an_uncollected_record(kind: Kind) {
    let engine = Engine::start(kind);
    let image = engine.image("pi");
    let fx = Fixture::new(&engine, "echo working; sleep 5", 2);
    let run = fx.run(&image, &[], &[]);
    let sandbox = Sandbox {
        engine: &engine,
        id: run.sandbox(),
    };
    let id = sandbox.id.clone();
    let iteration_1 = format!("{RECORDS}/iteration-1");
    assert!(
        busy_wait(Duration::from_secs(60), || sandbox.has("-d", &iteration_1)),
        "iteration 1 never started"
    );
    run.kill();
    assert!(
        busy_wait(Duration::from_secs(60), || sandbox
            .has("-f", &format!("{iteration_1}/result.json"))),
        "iteration 1 never finished"
    );
    sandbox.kill_supervisor();
    // The host died before it could collect iteration 1.
    let collected = fs::read_dir(fx.dir.path().join("runs"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .any(|d| d.path().join("iteration-1/result.json").exists());
    assert!(!collected);

    let entry = fx.ps_entry(&id);
    assert_eq!(entry["state"], "stopped", "{entry:#}");
    // A run cannot take the stopped sandbox; it says where its records are.
    let h = fx.harness.to_str().unwrap();
    let out = fx.output(&["run", h, "--sandbox", &id]);
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("its container is not running (exited with code 137, killed by SIGKILL); `pitcrew collect"),
        "{said}"
    );

    // `down` keeps it, names the record nobody collected and says the supervisor died.
    let out = fx.output(&["down", &id]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("1 record(s) not collected (iteration 1); its supervisor died (its container exited with code 137, killed by SIGKILL"),
        "{stderr}"
    );
    assert_eq!(sandbox.status(), "exited");

    let into = fx.dir.path().join("collected");
    let out = fx.output(&["collect", &id, "--out", into.to_str().unwrap(), "--json"]);
    let said = text(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("its supervisor died (its container exited with code 137"),
        "{said}"
    );
    // Its log's last line: the run's claim was orphaned when the host died.
    assert!(
        said.contains(&format!("`{} logs {id}` ends: ", kind.name())),
        "{said}"
    );
    assert!(said.contains("orphaned"), "{said}");
    let record = read_json(&into.join("iteration-1/result.json"));
    assert_eq!(record["exit_code"], 0, "{record:#}");
    assert_eq!(record["iteration"], 1, "{record:#}");
    assert!(
        read_text(&into.join("iteration-1/output.jsonl")).contains("working"),
        "{}",
        into.display()
    );
    assert!(fx.tmp_is_empty());

    down_keeps_then_force_removes(&fx, &sandbox, "its supervisor died");
}

/// The host's `pitcrew run` dies during iteration 1, which the supervisor finishes and keeps
/// uncollected. `down` stops the container and keeps it for the record, `collect` copies the
/// record out and says the sandbox was stopped (not that it died), and one more `down` removes
/// the container and its volumes.
fn stopped_holding_an_uncollected_record(kind: Kind) {
    let engine = Engine::start(kind);
    let image = engine.image("pi");
    let fx = Fixture::new(&engine, "echo working; sleep 3", 2);
    let run = fx.run(&image, &[], &[]);
    let sandbox = Sandbox {
        engine: &engine,
        id: run.sandbox(),
    };
    let id = sandbox.id.clone();
    let iteration_1 = format!("{RECORDS}/iteration-1");
    assert!(
        busy_wait(Duration::from_secs(60), || sandbox.has("-d", &iteration_1)),
        "iteration 1 never started"
    );
    run.kill();
    assert!(
        busy_wait(Duration::from_secs(60), || sandbox
            .has("-f", &format!("{iteration_1}/result.json"))),
        "iteration 1 never finished"
    );
    let volumes = sandbox.volumes();

    let out = fx.output(&["down", &id]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("1 record(s) not collected (iteration 1): its state is kept"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("`pitcrew down {id}` removes the sandbox")),
        "{stderr}"
    );
    assert_eq!(sandbox.status(), "exited");

    let into = fx.dir.path().join("collected");
    let out = fx.output(&["collect", &id, "--out", into.to_str().unwrap()]);
    let said = text(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("it was stopped (its container exited with code 0)"),
        "{said}"
    );
    assert!(!said.contains("died"), "{said}");
    let record = read_json(&into.join("iteration-1/result.json"));
    assert_eq!(record["iteration"], 1, "{record:#}");
    assert!(fx.tmp_is_empty());

    // Collected: one `down` removes the container and its volumes.
    let out = fx.output(&["down", &id]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(sandbox.status(), "gone", "{stderr}");
    for v in &volumes {
        let left = fx.engine.cli(&["volume", "inspect", v]);
        assert!(!left.status.success(), "volume {v} is left");
    }
}

#[test]
fn a_killed_podman_supervisor_keeps_its_container_and_collect_copies_the_record_out() {
    if engines::require(Kind::Podman) {
        killed_during_a_run(Kind::Podman);
    }
}

#[test]
fn a_killed_docker_supervisor_keeps_its_container_and_collect_copies_the_record_out() {
    if engines::require(Kind::Docker) {
        killed_during_a_run(Kind::Docker);
    }
}

#[test]
fn a_dead_podman_supervisor_with_an_uncollected_record_is_kept_until_forced() {
    if engines::require(Kind::Podman) {
        killed_holding_an_uncollected_record(Kind::Podman);
    }
}

#[test]
fn a_dead_docker_supervisor_with_an_uncollected_record_is_kept_until_forced() {
    if engines::require(Kind::Docker) {
        killed_holding_an_uncollected_record(Kind::Docker);
    }
}

#[test]
fn a_stopped_podman_sandbox_with_an_uncollected_record_goes_with_collect_then_down() {
    if engines::require(Kind::Podman) {
        stopped_holding_an_uncollected_record(Kind::Podman);
    }
}

#[test]
fn a_stopped_docker_sandbox_with_an_uncollected_record_goes_with_collect_then_down() {
    if engines::require(Kind::Docker) {
        stopped_holding_an_uncollected_record(Kind::Docker);
    }
}
