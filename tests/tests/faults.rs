//! Faults an operator's machine produces, end to end with the local engine: the disk under the
//! records fills up, the supervisor is killed, the host's `pitcrew run` is killed, two runs
//! reach for one sandbox, and a shell hands `pitcrew run --keep` a descriptor it waits on. In
//! each case no record is lost and nothing runs on unnoticed. And where no engine bounds the
//! agent's disk, its budget (`disk:`) stops it and bounds what its record costs the host.
//!
//! Needs root and PID namespaces (and, for the full disk, a tmpfs mount); skipped otherwise, or
//! a failure with `PITCREW_REQUIRE_E2E=1`.

#![allow(non_snake_case)] // attack tests are named attack_<class>__<case> (scripts/security-report)

use pitcrew_e2e::{
    binary, busy_wait, iteration_dir, pitcrew_run_output, read_json, require_pid_namespaces,
    LocalFixture,
};
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A harness directory and a state directory reachable by the agent's uid: the shared
/// local-engine fixture, with what these tests add to it.
struct Fixture(LocalFixture);

impl std::ops::Deref for Fixture {
    type Target = LocalFixture;
    fn deref(&self) -> &LocalFixture {
        &self.0
    }
}

fn fixture(script: &str, iterations: u32) -> Fixture {
    Fixture(LocalFixture::new(script, iterations, "", false))
}

impl Fixture {
    /// Waits until the first run directory holds iteration 1's collected record.
    fn wait_first_record(&self) {
        assert!(
            busy_wait(Duration::from_secs(30), || self
                .run_dirs()
                .first()
                .is_some_and(|d| d.join("iteration-1/result.json").exists())),
            "iteration 1 was never collected"
        );
    }

    /// The run directories below the harness's `runs/`.
    fn run_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = fs::read_dir(self.root.join("runs"))
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .collect();
        dirs.sort();
        dirs
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The pid of the namespace's PID 1 (`pitcrew-init serve`) of a local sandbox: the only child
/// of the `unshare` process `engine.json` names.
fn supervisor_pid(fx: &Fixture, id: &str) -> u32 {
    let rec = read_json(&fx.sandbox_dir(id).join("engine.json"));
    let unshare = rec["pid"].as_u64().unwrap();
    let children = fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children")).unwrap();
    children.split_whitespace().next().unwrap().parse().unwrap()
}

/// A tmpfs of `size` mounted on `dir`, unmounted (lazily: a sandbox's mount namespace may still
/// hold it) when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_leaves_pid1_up_and_every_record_saying_so() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = fixture(
        "dd if=/dev/zero of=big bs=1M count=200 2>/dev/null || { echo 'no space' >&2; exit 3; }",
        2,
    );
    let Some(_tmpfs) = Tmpfs::mount(&fx.state, "64m") else {
        pitcrew_e2e::skip("needs a tmpfs mount (mount -t tmpfs, as root) for the state directory");
        return;
    };
    let (out, doc) = pitcrew_run_output(&fx.harness, &fx.state, &["--keep"], &[]);
    let stderr = text(&out.stderr);
    let id = doc["sandbox"].as_str().unwrap().to_string();
    let rows = doc["iterations"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{doc:#}\n{stderr}");
    // Iteration 1: the agent's own failure, and the record says the disk was full.
    assert_eq!(rows[0]["exit_code"], 3, "{doc:#}");
    let reason = rows[0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("disk-full: the filesystem holding the records"),
        "{reason}"
    );
    let record = read_json(&iteration_dir(&doc, 1).join("result.json"));
    assert_eq!(
        record["disk_full"]["free_bytes"].as_u64(),
        Some(0),
        "{record:#}"
    );
    // Iteration 2: the disk has no room for a record, so the agent is not started.
    assert_eq!(rows[1]["exit_code"], 125, "{doc:#}");
    let reason = rows[1]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("disk-full: no room for the record"),
        "{reason}"
    );
    assert_eq!(rows[1]["verification"], "not verified", "{doc:#}");
    // PID 1 is still there and answers, and the record it kept in memory is collectable.
    let status = fx.output(&["inspect", &id, "--json", "--no-verify"]);
    assert!(status.status.success(), "{}", text(&status.stderr));
    let collect_dir = fx.root.join("collected");
    let out = fx.output(&[
        "collect",
        &id,
        "--iteration",
        "2",
        "--out",
        collect_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let record = read_json(&collect_dir.join("iteration-2/result.json"));
    assert_eq!(record["exit_code"], 125, "{record:#}");
    // Everything was collected: `down` removes the sandbox.
    let out = fx.output(&["down", &id]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!fx.sandbox_dir(&id).exists(), "{}", text(&out.stderr));
}

#[test]
fn a_killed_supervisor_keeps_its_records_and_log_and_the_host_says_so() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = fixture("echo working; sleep 2", 3);
    let run = fx
        .pitcrew(&["run", fx.harness.to_str().unwrap(), "--json"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let id = fx.wait_sandbox();
    // Killed during iteration 2, once iteration 1 is collected.
    fx.wait_first_record();
    let pid = supervisor_pid(&fx, &id);
    assert!(Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let out = run.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("the supervisor of sandbox {id} died")),
        "{stderr}"
    );
    assert!(stderr.contains("its state is kept"), "{stderr}");
    // The state, the records and the log are all still there.
    let dir = fx.sandbox_dir(&id);
    assert!(dir.join("records/iteration-1/result.json").is_file());
    assert!(!fs::read(dir.join("supervisor.log")).unwrap().is_empty());
    // `collect` reads the record from the storage, and says why.
    let into = fx.root.join("collected");
    let out = fx.output(&[
        "collect",
        &id,
        "--iteration",
        "1",
        "--out",
        into.to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("reading its record from its storage"),
        "{stderr}"
    );
    assert_eq!(
        read_json(&into.join("iteration-1/result.json"))["exit_code"],
        0
    );
    // `down` keeps it; `down --force` deletes it.
    let out = fx.output(&["down", &id]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(dir.join("supervisor.log").exists(), "{}", text(&out.stderr));
    let out = fx.output(&["down", &id, "--force"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!dir.exists());
}

#[test]
fn a_run_whose_host_died_shows_orphaned_and_resume_finishes_it() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = fixture("echo working; sleep 1", 4);
    let mut run = fx
        .pitcrew(&["run", fx.harness.to_str().unwrap(), "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let id = fx.wait_sandbox();
    fx.wait_first_record();
    run.kill().unwrap();
    run.wait().unwrap();
    let mut listed = Vec::new();
    assert!(
        busy_wait(Duration::from_secs(10), || {
            listed = fx.ps();
            listed.first().is_some_and(|s| s["state"] == "orphaned")
        }),
        "{listed:#?}"
    );
    let out = fx.output(&["ps", "--engine", "local"]);
    let table = text(&out.stdout);
    assert!(
        table.contains(&format!("pitcrew run --resume {id}")),
        "{table}"
    );
    // A new run cannot take the sandbox while the orphan waits.
    let out = fx.output(&[
        "run",
        fx.harness.to_str().unwrap(),
        "--sandbox",
        &id,
        "--iterations",
        "1",
    ]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("was orphaned here"), "{stderr}");
    // Resumed: the rest runs, every record ends up in the same run directory, and the sandbox
    // is stopped as the first run would have stopped it.
    let out = fx.output(&["run", "--resume", &id, "--json"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let run_dir = PathBuf::from(doc["run_dir"].as_str().unwrap());
    assert_eq!(fx.run_dirs(), vec![run_dir.clone()], "{doc:#}");
    for n in 1..=4 {
        let record = read_json(&run_dir.join(format!("iteration-{n}/result.json")));
        assert_eq!(record["exit_code"], 0, "iteration {n}: {record:#}");
    }
    assert!(!run_dir.join("iteration-5").exists());
    // The resumed run reports what it collected and what it ran, up to the last iteration.
    let rows = doc["iterations"].as_array().unwrap();
    assert_eq!(rows.last().unwrap()["iteration"], 4, "{doc:#}");
    assert!(rows.iter().all(|r| r["exit_code"] == 0), "{doc:#}");
    // Every agent slept a second: a row collected now has the record's own duration, not 0.
    assert!(
        rows.iter()
            .all(|r| r["duration_ms"].as_u64().is_some_and(|ms| ms >= 1000)),
        "{doc:#}"
    );
    assert!(fx.ps().is_empty(), "{:#?}", fx.ps());
}

#[test]
fn a_stopped_sandbox_holding_uncollected_records_goes_with_collect_then_down() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = fixture("echo working; sleep 1", 4);
    let mut run = fx
        .pitcrew(&["run", fx.harness.to_str().unwrap(), "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let id = fx.wait_sandbox();
    // Killed once iteration 2 has started: the host never collects it.
    let second = fx.sandbox_dir(&id).join("records/iteration-2");
    assert!(
        busy_wait(Duration::from_secs(30), || second.exists()),
        "iteration 2 never started"
    );
    run.kill().unwrap();
    run.wait().unwrap();
    assert!(
        busy_wait(Duration::from_secs(10), || fx
            .ps()
            .first()
            .is_some_and(|s| s["state"] == "orphaned")),
        "{:#?}",
        fx.ps()
    );
    // `down` stops it and keeps it for the record the host never collected, naming the way out.
    let out = fx.output(&["down", &id]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("is kept"), "{stderr}");
    assert!(
        stderr.contains(&format!("`pitcrew down {id}` removes the sandbox")),
        "{stderr}"
    );
    let dir = fx.sandbox_dir(&id);
    assert!(dir.exists());
    // `ps` says why it is still there and what removes it.
    let listed = fx.ps();
    assert_eq!(listed[0]["state"], "stopped", "{listed:#?}");
    let note = listed[0]["detail"]["state_detail"]
        .as_str()
        .unwrap_or_default();
    assert!(
        note.contains(&format!(
            "pitcrew collect {id} fetches its records, then pitcrew down {id} removes it"
        )),
        "{listed:#?}"
    );
    // `collect` reads each record from the storage and says the sandbox was stopped: it did not
    // die.
    let into = fx.root.join("collected");
    for n in ["1", "2"] {
        let out = fx.output(&[
            "collect",
            &id,
            "--iteration",
            n,
            "--out",
            into.to_str().unwrap(),
        ]);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(stderr.contains("it was stopped ("), "{stderr}");
        assert!(!stderr.contains("died"), "{stderr}");
        assert!(
            stderr.contains("reading its record from its storage"),
            "{stderr}"
        );
        assert!(into.join(format!("iteration-{n}/result.json")).is_file());
    }
    // Every record collected: one `down` removes it.
    let out = fx.output(&["down", &id]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!dir.exists(), "{stderr}");
    assert!(fx.ps().is_empty(), "{:#?}", fx.ps());
}

#[test]
fn a_host_that_hangs_with_its_connection_open_loses_its_claim_when_the_lease_lapses() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = fixture("echo working; sleep 1", 3);
    let mut run = fx
        .pitcrew(&[
            "run",
            fx.harness.to_str().unwrap(),
            "--json",
            "--lease",
            "2s",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let id = fx.wait_sandbox();
    fx.wait_first_record();
    // Stopped, not killed: its connection stays open, it only stops renewing.
    let pid = run.id().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    let mut listed = Vec::new();
    let orphaned = busy_wait(Duration::from_secs(20), || {
        listed = fx.ps();
        listed.first().is_some_and(|s| s["state"] == "orphaned")
    });
    run.kill().unwrap();
    run.wait().unwrap();
    assert!(orphaned, "{listed:#?}");
    let because = listed[0]["detail"]["claim"]["orphaned_because"]
        .as_str()
        .unwrap_or_default();
    assert!(because.starts_with("its lease lapsed"), "{listed:#?}");
    // The run it left is resumable, and finishes.
    let out = fx.output(&["run", "--resume", &id, "--json"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let run_dir = PathBuf::from(doc["run_dir"].as_str().unwrap());
    for n in 1..=3 {
        let record = read_json(&run_dir.join(format!("iteration-{n}/result.json")));
        assert_eq!(record["exit_code"], 0, "iteration {n}: {record:#}");
    }
}

#[test]
fn a_live_host_keeps_its_claim_through_iterations_longer_than_its_lease() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = fixture("sleep 3", 2);
    let (out, doc) = pitcrew_run_output(&fx.harness, &fx.state, &["--lease", "1s"], &[]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}\n{doc:#}");
    let rows = doc["iterations"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{doc:#}");
    assert!(rows.iter().all(|r| r["exit_code"] == 0), "{doc:#}");
    assert!(!stderr.contains("orphaned"), "{stderr}");
}

#[test]
fn a_second_run_is_refused_before_it_uploads_anything() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = fixture("echo working; sleep 1", 1);
    let (out, doc) = pitcrew_run_output(&fx.harness, &fx.state, &["--keep"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id = doc["sandbox"].as_str().unwrap().to_string();
    let h = fx.harness.to_str().unwrap();
    let first = fx
        .pitcrew(&["run", h, "--sandbox", &id, "--iterations", "3", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        busy_wait(Duration::from_secs(20), || fx
            .ps()
            .first()
            .is_some_and(|s| s["state"] == "in-run")),
        "the first run never claimed the sandbox"
    );
    // The second run's harness uploads a different plugin: none of it may land.
    let plugin = fx.sandbox_dir(&id).join("root/plugins/p/index.js");
    let before = fs::read(&plugin).unwrap();
    fs::write(fx.root.join("plugins/p/index.js"), "module.exports = 2;\n").unwrap();
    let out = fx.output(&["run", h, "--sandbox", &id, "--iterations", "1"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("a sandbox serves one run at a time"),
        "{stderr}"
    );
    assert_eq!(fs::read(&plugin).unwrap(), before);
    // The first run goes on, verified against its own trees.
    let out = first.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    for row in doc["iterations"].as_array().unwrap() {
        assert_eq!(row["exit_code"], 0, "{doc:#}");
    }
    assert_eq!(doc["iterations"].as_array().unwrap().len(), 3);
}

#[test]
fn a_kept_sandbox_holds_none_of_the_descriptors_of_the_shell_that_started_it() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = fixture("echo working", 1);
    // The shell gives the run a descriptor (9) on the pipe `cat` reads: a sandbox holding it
    // would keep the pipeline open until it is taken down.
    let pipeline = format!(
        "( '{}' run '{}' --keep --json --state-dir '{}' 9>&1 ) | cat",
        binary("pitcrew").display(),
        fx.harness.display(),
        fx.state.display()
    );
    let mut child = Command::new("sh")
        .args(["-c", &pipeline])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ended = busy_wait(Duration::from_secs(60), || {
        child.try_wait().ok().flatten().is_some()
    });
    if !ended {
        let _ = child.kill();
    }
    assert!(ended, "the pipeline waited on the kept sandbox");
    let id = fx.wait_sandbox();
    let rec = read_json(&fx.sandbox_dir(&id).join("engine.json"));
    for pid in [
        rec["pid"].as_u64().unwrap(),
        u64::from(supervisor_pid(&fx, &id)),
    ] {
        let fds: Vec<String> = fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|fd| fd.parse::<u32>().is_ok_and(|n| n > 2))
            .filter(|fd| {
                // The supervisor's own: its signalfd and control socket.
                let target = fs::read_link(format!("/proc/{pid}/fd/{fd}")).unwrap_or_default();
                let t = target.to_string_lossy();
                !(t.starts_with("anon_inode:[signalfd]") || t.starts_with("socket:"))
            })
            .collect();
        assert!(fds.is_empty(), "pid {pid} holds descriptors {fds:?}");
    }
}

/// Free blocks of the filesystem holding `dir` (`stat -f`).
fn free_blocks(dir: &Path) -> u64 {
    let out = Command::new("stat")
        .args(["-f", "-c", "%f"])
        .arg(dir)
        .output()
        .unwrap();
    text(&out.stdout).trim().parse().unwrap()
}

#[test]
fn attack_limits__disk_writes_past_the_budget_kill_the_agent() {
    if !require_pid_namespaces() {
        return;
    }
    // 1: many 1 MiB files, slowly; 2: one file past the budget, fallocate, 32 MiB of output;
    // 3: a writer that left the agent's session and group and ignores TERM, while the agent
    // itself exits 0 after 100 ms; 4: empty files (inodes, no bytes).
    let fx = fixture(
        r#"n=$(cat .n 2>/dev/null || echo 0); n=$((n+1)); echo $n > .n
case $n in
1) i=0; while [ $i -lt 200 ]; do i=$((i+1)); head -c 1048576 /dev/zero > f$i || exit 4; sleep 0.01; done ;;
2) rm -f f*; if dd if=/dev/zero of=one bs=1M count=32 2>/dev/null; then exit 7; fi
   [ "$(stat -c %s one)" -eq 16777216 ] || exit 6; rm -f one
   if fallocate -l 8388608 fa 2>/dev/null; then exit 8; fi; rm -f fa
   head -c 33554432 /dev/zero ;;
3) setsid sh -c 'trap "" TERM HUP; i=0; while [ $i -lt 200 ]; do i=$((i+1)); head -c 1048576 /dev/zero > g$i; sleep 0.01; done' </dev/null >/dev/null 2>&1 &
   sleep 0.1; exit 0 ;;
4) rm -f g*; mkdir d; i=0; while [ $i -lt 50000 ]; do : > d/$i; i=$((i+1)); [ $((i % 1000)) -ne 0 ] || sleep 0.05; done ;;
esac"#,
        4,
    );
    let harness = fs::read_to_string(&fx.harness).unwrap();
    fs::write(&fx.harness, format!("{harness}disk: 16MiB\n")).unwrap();
    let Some(_tmpfs) = Tmpfs::mount(&fx.state, "512m") else {
        pitcrew_e2e::skip("needs a tmpfs mount (mount -t tmpfs, as root) for the state directory");
        return;
    };
    let (out, doc) = pitcrew_run_output(&fx.harness, &fx.state, &["--keep"], &[]);
    let stderr = text(&out.stderr);
    let rows = doc["iterations"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{doc:#}\n{stderr}");
    // 1 and 4 killed at a sample; 3's agent had exited 0, its writer was killed in the final
    // reap without the TERM grace it would have written through.
    for (n, code) in [(1, 137), (3, 1), (4, 137)] {
        let row = &rows[n - 1];
        assert_eq!(row["exit_code"], code, "iteration {n}: {doc:#}\n{stderr}");
        let reason = row["reason"].as_str().unwrap_or_default();
        assert!(
            reason.starts_with("disk-limit: the filesystem of ")
                && reason.contains("past limits.disk_bytes (16777216 bytes)")
                && reason.ends_with("the agent's tree was killed"),
            "iteration {n}: {reason}"
        );
        let record = read_json(&iteration_dir(&doc, n).join("result.json"));
        let disk = &record["confinement"]["limits"]["disk"];
        assert_eq!(disk["exceeded"], true, "{disk:#}");
        assert_eq!(disk["file_size_limit"], 16 << 20, "{disk:#}");
        let peak = disk["filesystems"][0]["peak_growth"].as_u64().unwrap();
        assert!(peak > 16 << 20 && peak < 100 << 20, "{disk:#}");
        if n == 4 {
            // Each empty file counted 4 KiB: stopped past 4096 of the 50000.
            let inodes = disk["filesystems"][0]["peak_inodes"].as_u64().unwrap();
            assert!((4096..50_000).contains(&inodes), "{disk:#}");
        }
    }
    // One file is held at the budget by RLIMIT_FSIZE, fallocate is not supported, and the
    // freed space counts back; of 32 MiB of output the record keeps the budget's 16.
    assert_eq!(rows[1]["exit_code"], 0, "{doc:#}\n{stderr}");
    let record = read_json(&iteration_dir(&doc, 2).join("result.json"));
    assert_eq!(
        record["confinement"]["limits"]["disk"]["exceeded"], false,
        "{record:#}"
    );
    let stdout = &record["agent"]["output"][0];
    assert_eq!(stdout["stream"], "stdout", "{record:#}");
    assert_eq!(stdout["kept"], 16 << 20, "{record:#}");
    assert_eq!(stdout["dropped"], 16 << 20, "{record:#}");
    // The writer that left the group was reaped: nothing writes any more.
    let before = free_blocks(&fx.state);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(free_blocks(&fx.state), before, "something still writes");
    // Down while the tmpfs holds its state (the fixture's own cleanup runs after the unmount).
    let id = doc["sandbox"].as_str().unwrap();
    let out = fx.output(&["down", id, "--force"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// The bytes the files below `dir` hold: their apparent sizes (`st_size`) and the blocks
/// allocated to them and to the directories (`st_blocks`), summed.
fn tree_cost(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt as _;
    let (mut apparent, mut allocated) = (0, 0);
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        allocated += meta.blocks() * 512;
        if meta.is_dir() {
            let (a, b) = tree_cost(&entry.path());
            apparent += a;
            allocated += b;
        } else {
            apparent += meta.len();
        }
    }
    (apparent, allocated)
}

#[test]
fn attack_limits__sparse_files_cost_the_host_no_more_than_the_disk_budget() {
    if !require_pid_namespaces() {
        return;
    }
    // Twenty 15 MiB sparse files in `output/` and twenty in the workspace take a few KiB in
    // the sandbox (holes), well within its 16 MiB disk budget; copied into the record and
    // collected they would cost the host 600 MB. The record's copies are bounded by the disk
    // budget, counted in apparent size: one file arrives, the others are named as cut.
    let script = r#"mkdir -p output
i=0
while [ $i -lt 20 ]; do
  i=$((i + 1)); truncate -s 15M output/sparse-$i ws-sparse-$i || exit 9
done
exit 5"#;
    let fx = fixture(script, 1);
    let harness = fs::read_to_string(&fx.harness).unwrap();
    fs::write(&fx.harness, format!("{harness}disk: 16MiB\n")).unwrap();
    // The budget watches the workspace's filesystem: a tmpfs of its own, which no other writer
    // of the machine grows. Room for what the record's copy took before (600 MB).
    let Some(_tmpfs) = Tmpfs::mount(&fx.state, "1g") else {
        pitcrew_e2e::skip("needs a tmpfs mount (mount -t tmpfs, as root) for the state directory");
        return;
    };
    let (out, doc) = pitcrew_run_output(&fx.harness, &fx.state, &["--collect-workspace"], &[]);
    let stderr = text(&out.stderr);
    // The agent's own exit code, and its record on the host.
    assert_eq!(out.status.code(), Some(5), "{doc:#}\n{stderr}");
    let it = iteration_dir(&doc, 1);
    let record = read_json(&it.join("result.json"));
    assert_eq!(record["exit_code"], 5, "{record:#}");
    assert_eq!(
        record["confinement"]["limits"]["disk"]["exceeded"], false,
        "{record:#}"
    );
    // The whole record, collected workspace included, costs the host about the budget.
    let budget: u64 = 16 << 20;
    let (apparent, allocated) = tree_cost(&it);
    assert!(
        apparent <= budget + (1 << 20),
        "{apparent} bytes of files in {}",
        it.display()
    );
    assert!(
        allocated <= budget + (2 << 20),
        "{allocated} bytes on disk in {}",
        it.display()
    );
    // The record event names what was cut and the budget it was cut at.
    let events = fs::read_to_string(it.join("events.jsonl")).unwrap();
    let event = events
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["step"] == "record")
        .unwrap_or_else(|| panic!("no record event: {events}"));
    let detail = &event["detail"];
    assert_eq!(detail["copy_budget_bytes"], budget, "{detail:#}");
    assert_eq!(detail["output"]["files"], 1, "{detail:#}");
    assert_eq!(detail["output"]["bytes"], 15 << 20, "{detail:#}");
    let cut = |part: &str, prefix: &str| {
        detail[part]["skipped"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .filter(|s| s.starts_with(prefix) && s.contains("(byte budget"))
            .count()
    };
    assert_eq!(cut("output", "sparse-"), 19, "{detail:#}");
    assert_eq!(cut("workspace", "ws-sparse-"), 20, "{detail:#}");
    let copied: Vec<_> = fs::read_dir(it.join("output")).unwrap().collect();
    assert_eq!(copied.len(), 1, "{copied:?}");
    assert!(!fs::read_dir(it.join("workspace")).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with("ws-sparse-")));
}

/// The `iteration-N` directories in `records`, and the bytes allocated to the whole directory
/// (`du`).
fn records_on_disk(records: &Path) -> (usize, u64) {
    let count = fs::read_dir(records)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("iteration-"))
        .count();
    let out = Command::new("du")
        .args(["-s", "-B1"])
        .arg(records)
        .output()
        .unwrap();
    let bytes = text(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    (count, bytes)
}

#[test]
fn five_thousand_iterations_leave_the_sandbox_only_the_records_its_retention_keeps() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = fixture("echo \"$PWD\" > out.txt", 1000);
    let harness = fs::read_to_string(&fx.harness).unwrap();
    fs::write(
        &fx.harness,
        format!("{harness}retention:\n  records: 20\n  size: 2MiB\n"),
    )
    .unwrap();
    let h = fx.harness.to_str().unwrap();
    let (out, doc) = pitcrew_run_output(&fx.harness, &fx.state, &["--keep"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id = doc["sandbox"].as_str().unwrap().to_string();
    let records = fx.sandbox_dir(&id).join("records");
    for run in 1..=5 {
        if run > 1 {
            let out = fx.output(&["run", h, "--sandbox", &id, "--json"]);
            assert!(out.status.success(), "run {run}: {}", text(&out.stderr));
        }
        let (count, bytes) = records_on_disk(&records);
        assert!(count <= 20, "run {run}: {count} records in the sandbox");
        // The records, their directories and `.collected`: within the retention's 2 MiB.
        assert!(bytes <= 2 << 20, "run {run}: {bytes} bytes of records");
    }
    let out = fx.output(&["inspect", &id, "--json", "--no-verify"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    let status = if status["status"].is_object() {
        &status["status"]
    } else {
        &status
    };
    assert_eq!(status["iteration"], 5000, "{:#}", status["retention"]);
    assert_eq!(
        status["retention"]["deleted"],
        5000 - 20,
        "{:#}",
        status["retention"]
    );
    assert_eq!(status["uncollected"]["count"], 0);
    // The history the status reply carries is bounded too.
    assert_eq!(status["history"].as_array().unwrap().len(), 1000);
    assert_eq!(status["history_left_out"], 4000);
    let out = fx.output(&["down", &id]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn prune_takes_down_an_orphan_and_leaves_a_kept_sandbox() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = fixture("echo working; sleep 1", 3);
    let h = fx.harness.to_str().unwrap();
    // A kept sandbox: nobody drives it, but it was kept on purpose.
    let (out, doc) = pitcrew_run_output(
        &fx.harness,
        &fx.state,
        &["--keep", "--iterations", "1"],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let kept = doc["sandbox"].as_str().unwrap().to_string();
    // An orphan: its host killed during iteration 2.
    let mut run = fx
        .pitcrew(&["run", h, "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut orphan = String::new();
    assert!(
        busy_wait(Duration::from_secs(30), || {
            orphan = fx
                .ps()
                .iter()
                .filter_map(|s| s["id"].as_str())
                .find(|id| *id != kept)
                .unwrap_or_default()
                .to_string();
            // Iteration 1 collected and iteration 2 started in the sandbox: the host is then
            // killed with a record it never collects (under load, a kill between the two
            // would leave nothing to keep).
            !orphan.is_empty()
                && fx.run_dirs().iter().any(|d| {
                    d.to_string_lossy().ends_with(&orphan)
                        && d.join("iteration-1/result.json").exists()
                })
                && fx.sandbox_dir(&orphan).join("records/iteration-2").exists()
        }),
        "the second run never collected iteration 1 and started iteration 2"
    );
    run.kill().unwrap();
    run.wait().unwrap();
    let state_of = |id: &str| {
        fx.ps()
            .into_iter()
            .find(|s| s["id"] == id)
            .map(|s| s["state"].as_str().unwrap_or_default().to_string())
    };
    assert!(
        busy_wait(Duration::from_secs(10), || state_of(&orphan).as_deref()
            == Some("orphaned")),
        "{:#?}",
        fx.ps()
    );
    // --dry-run names the orphan alone and changes nothing.
    let out = fx.output(&["prune", "--dry-run", "--engine", "local"]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        said.contains(&format!("would prune {orphan} (local, orphaned")),
        "{said}"
    );
    assert!(!said.contains(&kept), "{said}");
    assert_eq!(state_of(&orphan).as_deref(), Some("orphaned"));
    // prune stops it; the record of the iteration its host never collected keeps its state,
    // until --force.
    let out = fx.output(&["prune", "--engine", "local"]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        said.contains(&format!("stopped {orphan} (local, orphaned")),
        "{said}"
    );
    assert!(said.contains("but did not remove it: "), "{said}");
    assert!(said.contains("is kept"), "{said}");
    assert!(!said.contains("pruned"), "{said}");
    // The same as JSON: one entry per sandbox, its outcome named.
    let out = fx.output(&["prune", "--engine", "local", "--dry-run", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed[0]["sandbox"], orphan.as_str(), "{listed:#}");
    assert_eq!(listed[0]["outcome"], "would-prune", "{listed:#}");
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed:#}");
    assert!(!said.contains(&kept), "{said}");
    let out = fx.output(&["prune", "--engine", "local", "--force"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&format!(
            "pruned {orphan} (local, stopped: its supervisor is gone): removed"
        )),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(state_of(&orphan), None, "{:#?}", fx.ps());
    assert!(!fx.sandbox_dir(&orphan).exists());
    // The kept sandbox is untouched, and still answers.
    assert_eq!(state_of(&kept).as_deref(), Some("kept"));
    let out = fx.output(&["prune", "--engine", "local"]);
    assert_eq!(text(&out.stdout), "nothing to prune\n");
}

#[test]
fn attack_limits__directories_the_workspace_gathers_cost_the_host_past_the_disk_budget() {
    if !require_pid_namespaces() {
        return;
    }
    // Six iterations each add 1800 directories holding one empty file each to the workspace:
    // 3600 inodes, 14.4 MiB as the disk watcher counts them, within the 16 MiB budget of that
    // iteration, and 0 bytes of file content. The workspace keeps them, and every record copies
    // all it has up to the 50000-entry budget (the byte budget counts only file content): on
    // the host each directory the copy makes for its file is a 4 KiB block, whatever the disk
    // budget says.
    let script = r#"n=$(cat .n 2>/dev/null || echo 0); n=$((n + 1)); echo $n > .n
mkdir -p d$n && cd d$n && seq 1800 | xargs mkdir && seq 1800 | sed 's|$|/f|' | xargs touch || exit 9"#;
    let iterations = 6;
    let fx = fixture(script, iterations);
    let harness = fs::read_to_string(&fx.harness).unwrap();
    fs::write(&fx.harness, format!("{harness}disk: 16MiB\n")).unwrap();
    let Some(_tmpfs) = Tmpfs::mount(&fx.state, "1g") else {
        pitcrew_e2e::skip("needs a tmpfs mount (mount -t tmpfs, as root) for the state directory");
        return;
    };
    let (out, doc) = pitcrew_run_output(&fx.harness, &fx.state, &["--collect-workspace"], &[]);
    assert!(out.status.success(), "{doc:#}\n{}", text(&out.stderr));
    let it = iteration_dir(&doc, iterations as usize);
    let record = read_json(&it.join("result.json"));
    assert_eq!(record["exit_code"], 0, "{record:#}");
    assert_eq!(
        record["confinement"]["limits"]["disk"]["exceeded"], false,
        "{record:#}"
    );
    // The last record, with the workspace it collected, costs the host about the budget.
    let budget: u64 = 16 << 20;
    let (_, allocated) = tree_cost(&it);
    assert!(
        allocated <= budget + (2 << 20),
        "{allocated} bytes on disk in {} under a {budget}-byte disk budget",
        it.display()
    );
    // What did not fit is named in the `record` event, as cut at the byte budget.
    let events = fs::read_to_string(it.join("events.jsonl")).unwrap();
    let event = events
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["step"] == "record")
        .unwrap_or_else(|| panic!("no record event: {events}"));
    let workspace = &event["detail"]["workspace"];
    let cut = workspace["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|s| s.contains("/f (byte budget: 4608 bytes, "))
        .count();
    // 10800 empty files, each 4608 bytes with its directory: about 3600 fit in 16 MiB.
    assert_eq!(cut, 100, "{workspace:#}");
    assert!(
        workspace["skipped_count"].as_u64().unwrap() > 7000,
        "{workspace:#}"
    );
}
