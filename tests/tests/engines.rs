//! The podman and docker engines: `pitcrew run --engine podman|docker --image IMAGE` creates the
//! sandbox's container from the production pi image (`scripts/build-image pi`), runs and
//! collects the iterations, and the operator commands find it again by its label. What the
//! engine promises is checked from the agent's side, inside the container: PID 1 is
//! `pitcrew-init`, the agent has no capability and `NoNewPrivs`, the verified trees are not
//! writable, a daemon, `/dev/shm` entries, POSIX and System V queues, segments and semaphores
//! left by one iteration are gone
//! in the next, and a plugin changed through `<engine> exec` fails the next iteration with 96.
//! `pitcrew logs` prints and follows a container sandbox's supervisor log (on the offline test
//! image).
//!
//! Needs root, podman, and for docker `dockerd` (`.ci/run` installs docker.io and starts a
//! private daemon per test, never the machine's); skipped otherwise, or a failure with
//! `PITCREW_REQUIRE_E2E=1`.
#![allow(non_snake_case)] // attack tests are named attack_<class>__<case> (scripts/security-report)

use pitcrew_e2e::engines::{self, Engine, Kind};
use pitcrew_e2e::{binary, iteration_dir, read_json, read_text, write_command_harness};
use serde_json::Value;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Output;

/// A harness directory the agent's uid can read, whose agent is `/bin/sh -c SCRIPT`
/// ([`write_command_harness`]); the directory and the harness file.
fn harness(script: &str, iterations: u32, extra: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let file = write_command_harness(dir.path(), script, iterations, "60s", false, extra);
    (dir, file)
}

/// `pitcrew run HARNESS --engine E --image IMAGE <extra…>`: a new sandbox.
fn run_new(engine: &Engine, harness: &Path, image: &str, extra: &[&str]) -> Output {
    let mut args = vec!["run", harness.to_str().unwrap()];
    args.extend(["--engine", engine.kind.name(), "--image", image]);
    args.extend_from_slice(extra);
    pitcrew(engine, &args)
}

/// What the agent reports each iteration, as `key value` lines: PID 1's command line, its own
/// capability sets and no_new_privs, whether it could change a verified file or add one to a
/// verified tree, and in later iterations whether the daemon it left in the first still runs.
const PROBE: &str = r#"n=$(( $(cat count 2>/dev/null || echo 0) + 1 )); echo $n > count
echo "pid1 $(tr '\0' ' ' < /proc/1/cmdline)"
echo "oom $(cat /proc/self/oom_score_adj)"
grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status | tr -d ':\t' | sed 's/^\([A-Za-z]*\)/\1 /'
if (echo x >> /pitcrew/plugins/p/index.js) 2>/dev/null; then echo "plugin_write allowed"; else echo "plugin_write refused"; fi
if touch /pitcrew/plugins/p/planted 2>/dev/null; then echo "plugin_create allowed"; else echo "plugin_create refused"; fi
if (echo x >> /pitcrew/adapters/hooks.json) 2>/dev/null; then echo "adapter_write allowed"; else echo "adapter_write refused"; fi
if [ "$n" = 1 ]; then
  setsid sleep 987654 </dev/null >/dev/null 2>&1 &
  echo $! > daemon.pid
  echo "daemon started"
  echo left > /dev/shm/plant-$$
  mkdir /dev/shm/dir-$$ && echo left > /dev/shm/dir-$$/file
  ln -s /etc/shadow /dev/shm/link-$$
  ipcmk -M 4096 >/dev/null && ipcmk -Q >/dev/null && ipcmk -S 1 >/dev/null
  # A POSIX message queue: mq_open(2) (x86_64 number 240) through perl, which the image has.
  perl -e 'my $n = "plant"; syscall(240, $n, 0x40, 0600, 0) >= 0 or exit 1' || echo "mq_open failed"
elif kill -0 "$(cat daemon.pid)" 2>/dev/null; then
  echo "daemon alive"
else
  echo "daemon gone"
fi
echo "shm $(ls -A /dev/shm /dev/mqueue | grep -cv -e '^/' -e '^$')"
echo "sysv $(ipcs -m -q -s | grep -c '^0x')""#;

/// The `key value` lines of an iteration's output.
fn report(dir: &Path) -> std::collections::BTreeMap<String, String> {
    read_text(&dir.join("output.jsonl"))
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// `pitcrew args…` with the engine's environment; podman's with no `CONTAINERS_CONF`, as
/// installed (pitcrew passes the container's limits itself).
fn pitcrew(engine: &Engine, args: &[&str]) -> Output {
    engine
        .command(binary("pitcrew"))
        .args(args)
        .output()
        .expect("pitcrew")
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON ({e}); exit {:?}\nstdout: {}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The whole life of a sandbox in `kind`: created from the production image and confined,
/// kept, listed, inspected, driven again with `--sandbox` (where a plugin changed through the
/// engine's `exec` fails the next iteration with 96), and removed by `down`; a container
/// pitcrew did not create is left alone by `down`.
fn sandbox_life(kind: Kind) {
    let engine = Engine::start(kind);
    let image = engine.image("pi");
    // From the second run on, the host's validation command changes the uploaded plugin
    // through the engine's exec (as root, outside the agent) after the first iteration.
    let tamper = "validation:\n  - /bin/sh\n  - -c\n  - '[ -e tamper ] && [ ! -e tampered ] && touch tampered && \"$PITCREW_ENGINE\" exec \"$PITCREW_SANDBOX\" sh -c \"echo tampered >> /pitcrew/plugins/p/index.js\"; exit 1'\n";
    let (dir, harness) = harness(PROBE, 2, tamper);
    let h = harness.to_str().unwrap();

    // Run 1: two iterations in a new sandbox, kept.
    let out = run_new(&engine, &harness, &image, &["--keep", "--json"]);
    let doc = json_of(&out);
    // The validation command fails, the last iteration succeeded: the run succeeds.
    assert_eq!(doc["exit_code"], 0, "{doc:#}");
    let id = doc["sandbox"].as_str().unwrap().to_string();
    assert_eq!(doc["engine"], kind.name(), "{doc:#}");
    for n in 1..=2 {
        let it = iteration_dir(&doc, n);
        let record = read_json(&it.join("result.json"));
        assert_eq!(record["exit_code"], 0, "iteration {n}: {record:#}");
        assert_eq!(record["supervisor"]["mode"], "pid1", "{record:#}");
        let seen = report(&it);
        assert_eq!(seen["pid1"], "/usr/local/bin/pitcrew-init", "{seen:?}");
        for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert_eq!(seen[set], "0000000000000000", "{set}: {seen:?}");
        }
        assert_eq!(seen["NoNewPrivs"], "1", "{seen:?}");
        // The OOM killer takes the agent, never PID 1.
        assert_eq!(seen["oom"], "1000", "{seen:?}");
        assert_eq!(seen["plugin_write"], "refused", "{seen:?}");
        assert_eq!(seen["plugin_create"], "refused", "{seen:?}");
        assert_eq!(seen["adapter_write"], "refused", "{seen:?}");
        let daemon = if n == 1 { "started" } else { "gone" };
        assert_eq!(seen["daemon"], daemon, "iteration {n}: {seen:?}");
        // What the first left in /dev/shm and System V IPC is gone before the second.
        // (The segment `ipcmk -M` made is gone already: pitcrew creates the container with
        // kernel.shm_rmid_forced=1, so a segment dies with its last user.)
        let (shm, sysv) = if n == 1 { ("4", "2") } else { ("0", "0") };
        assert_eq!(seen["shm"], shm, "iteration {n}: {seen:?}");
        assert_eq!(seen["sysv"], sysv, "iteration {n}: {seen:?}");
        if n == 2 {
            // A file, a link, a directory with a file, a POSIX queue; a System V queue and
            // semaphore set.
            assert_eq!(
                record["ipc_sweep"],
                serde_json::json!({"shm_entries": 5, "sysv_objects": 2}),
                "{record:#}"
            );
        }
    }

    // The container is what pitcrew said it made: labelled, confined, limited.
    let inspect = engine.cli(&["inspect", "--type", "container", &id]);
    assert!(inspect.status.success(), "{inspect:?}");
    let c: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    let c = &c[0];
    assert_eq!(
        c["Config"]["Labels"]["pitcrew.sandbox"],
        id.as_str(),
        "{c:#}"
    );
    assert_eq!(c["HostConfig"]["ReadonlyRootfs"], true, "{c:#}");
    assert_eq!(c["HostConfig"]["NetworkMode"], "none", "{c:#}");
    let opts = c["HostConfig"]["SecurityOpt"].to_string();
    assert!(opts.contains("no-new-privileges"), "{opts}");
    assert!(c["HostConfig"]["PidsLimit"].as_i64().unwrap() > 0, "{c:#}");
    assert!(c["HostConfig"]["Memory"].as_i64().unwrap() > 0, "{c:#}");

    // ps lists it, inspect finds it by its label without --engine.
    let ps = json_of(&pitcrew(&engine, &["ps", "--json"]));
    let listed = ps
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} not in ps: {ps:#}"));
    assert_eq!(listed["engine"], kind.name(), "{listed}");
    assert_eq!(listed["running"], true, "{listed}");
    let out = pitcrew(&engine, &["inspect", &id, "--json"]);
    assert!(out.status.success(), "{out:?}");
    let inspected = json_of(&out);
    assert_eq!(
        inspected["sandbox"]["image"],
        image.as_str(),
        "{inspected:#}"
    );
    assert_eq!(inspected["status"]["iteration"], 2, "{inspected:#}");
    // collect finds it too, and fetches the record the run collected.
    let out_dir = dir.path().join("collected");
    let out = pitcrew(
        &engine,
        &[
            "collect",
            &id,
            "--iteration",
            "1",
            "--out",
            out_dir.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        read_text(&out_dir.join("iteration-1/output.jsonl")),
        read_text(&iteration_dir(&doc, 1).join("output.jsonl"))
    );

    // Run 2 in the same sandbox: the plugin is uploaded again, changed through the engine's
    // exec after the first iteration, and the second refuses to launch. The sandbox stays.
    fs::write(dir.path().join("tamper"), "").unwrap();
    let out = pitcrew(&engine, &["run", h, "--sandbox", &id, "--json"]);
    let again = json_of(&out);
    assert_eq!(out.status.code(), Some(96), "{again:#}");
    assert_eq!(again["sandbox"], id.as_str(), "{again:#}");
    assert_eq!(again["kept"], true, "{again:#}");
    // The sandbox counts on: its third and fourth iterations.
    let first = read_json(&iteration_dir(&again, 3).join("result.json"));
    assert_eq!(first["exit_code"], 0, "{first:#}");
    assert_eq!(
        first["iteration"], 3,
        "the sandbox's third iteration: {first:#}"
    );
    let refused = read_json(&iteration_dir(&again, 4).join("result.json"));
    assert_eq!(refused["exit_code"], 96, "{refused:#}");
    assert!(
        refused["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("index.js"),
        "{refused:#}"
    );
    assert!(refused["agent"].is_null(), "nothing launched: {refused:#}");
    assert!(engine.has_container(&id), "{id} is kept");

    // A container pitcrew did not create (no label) is not pitcrew's to remove.
    let foreign = format!("foreign-{id}");
    let made = engine.cli(&["create", "--name", &foreign, &image]);
    assert!(made.status.success(), "{made:?}");
    let out = pitcrew(&engine, &["down", &foreign, "--engine", kind.name()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("pitcrew did not create it"),
        "{out:?}"
    );
    assert!(engine
        .cli(&["inspect", "--type", "container", &foreign])
        .status
        .success());
    let _ = engine.cli(&["rm", "--force", &foreign]);

    // down removes the sandbox's container and its two anonymous volumes.
    let volumes: Vec<String> = c["Mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["Type"] == "volume")
        .map(|m| m["Name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(volumes.len(), 2, "{c:#}");
    let out = pitcrew(&engine, &["down", &id]);
    assert!(out.status.success(), "{out:?}");
    assert!(!engine.has_container(&id), "{id} was left");
    for v in &volumes {
        let left = engine.cli(&["volume", "inspect", v]);
        assert!(!left.status.success(), "volume {v} is left");
    }
}

#[test]
fn attack_container_engine__podman_sandbox_confined_reaped_verified_and_removed() {
    if engines::require(Kind::Podman) {
        sandbox_life(Kind::Podman);
    }
}

#[test]
fn attack_container_engine__docker_sandbox_confined_reaped_verified_and_removed() {
    if engines::require(Kind::Docker) {
        sandbox_life(Kind::Docker);
    }
}

/// A run that does not keep its sandbox leaves no container behind, whatever its outcome, and
/// a sandbox that cannot come up (an image without pitcrew-init) leaves none either.
fn nothing_left(kind: Kind) {
    let engine = Engine::start(kind);
    let image = engine.image("pi");
    let (_dir, harness) = harness("echo hi; exit 3", 1, "");
    let out = run_new(&engine, &harness, &image, &["--json"]);
    let doc = json_of(&out);
    assert_eq!(out.status.code(), Some(3), "{doc:#}");
    let id = doc["sandbox"].as_str().unwrap();
    assert!(!engine.has_container(id), "{id} was left");

    // Images whose sandbox never answers: an entrypoint that exits (the container stops
    // before its supervisor answers), one that does not exist (`run` itself fails after
    // creating the container). Nothing stays either way.
    let ctx = tempfile::tempdir().unwrap();
    let file = ctx.path().join("Containerfile");
    for (entrypoint, said) in [
        ("/bin/false", "before its supervisor answered"),
        ("/nonexistent/pitcrew-init", "creating its container"),
    ] {
        let tag = format!("localhost/pitcrew-broken:{}", std::process::id());
        fs::write(
            &file,
            format!("FROM {image}\nENTRYPOINT [\"{entrypoint}\"]\n"),
        )
        .unwrap();
        let (file, ctx) = (file.to_str().unwrap(), ctx.path().to_str().unwrap());
        let built = engine.cli(&["build", "--tag", &tag, "--file", file, ctx]);
        assert!(built.status.success(), "{built:?}");
        let out = run_new(&engine, &harness, &tag, &[]);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(said), "{entrypoint}: {stderr}");
        let left = engine.containers_from(&tag);
        assert!(left.is_empty(), "{entrypoint}: {left:?}");
        let _ = engine.cli(&["rmi", "--force", &tag]);
    }

    // An image the engine does not have is an error, not a pull.
    let out = run_new(&engine, &harness, "localhost/pitcrew-absent:none", &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}

/// An agent that would fill the container's memory with System V shared memory (charged to the
/// container, not to any process, and outliving its maker) cannot: a segment dies with its
/// last user and none is larger than the agent's memory, so PID 1 is not OOM-killed and both
/// iterations are recorded.
fn shared_memory_hog(kind: Kind) {
    let engine = Engine::start(kind);
    let image = engine.image("pi");
    // 1000 segments of 1 MiB written and left unattached (without pitcrew's sysctls they
    // would stay, charged to the container), then one segment larger than the agent's memory.
    let hog = r#"perl -e 'my $s = "x" x (1 << 20); my $n = 0;
  while ($n < 1000) { my $id = shmget(0, 1 << 20, 01600); defined $id or last; shmwrite($id, $s, 0, 1 << 20) or last; $n++ }
  print "segments $n\n"'
echo "alive $(ipcs -m | grep -c '^0x')"
perl -e 'print "big ", (defined shmget(0, 128 << 20, 01600) ? "made" : "refused"), "\n"'"#;
    let (_dir, harness) = harness(hog, 2, "memory: 64MiB\n");
    let out = run_new(&engine, &harness, &image, &["--json"]);
    let doc = json_of(&out);
    assert_eq!(doc["exit_code"], 0, "{doc:#}");
    for n in 1..=2 {
        let it = iteration_dir(&doc, n);
        let record = read_json(&it.join("result.json"));
        assert_eq!(record["exit_code"], 0, "{record:#}");
        let seen = report(&it);
        // Each segment died with its last user: none is left to fill the container.
        assert_eq!(seen["segments"], "1000", "iteration {n}: {seen:?}");
        assert_eq!(seen["alive"], "0", "iteration {n}: {seen:?}");
        // kernel.shmmax is the agent's memory.
        assert_eq!(seen["big"], "refused", "iteration {n}: {seen:?}");
    }
}

#[test]
fn attack_limits__shared_memory_cannot_fill_a_podman_container() {
    if engines::require(Kind::Podman) {
        shared_memory_hog(Kind::Podman);
    }
}

#[test]
fn attack_limits__shared_memory_cannot_fill_a_docker_container() {
    if engines::require(Kind::Docker) {
        shared_memory_hog(Kind::Docker);
    }
}

#[test]
fn a_podman_run_leaves_no_container_behind() {
    if engines::require(Kind::Podman) {
        nothing_left(Kind::Podman);
    }
}

#[test]
fn a_docker_run_leaves_no_container_behind() {
    if engines::require(Kind::Docker) {
        nothing_left(Kind::Docker);
    }
}

/// `pitcrew logs` on a container sandbox: the supervisor's log (PID 1's stderr, the container's
/// output) as it logged it at `RUST_LOG=info` (passed into the container with `--pass-env`), as
/// JSON objects with `--json`, and `--follow` ending when the sandbox is removed (`down`) or
/// stopped (`down --keep`); a stopped sandbox still has its log, a removed one has none. Runs
/// on the offline test image (`busybox`, this build's `pitcrew-init`) under a tag of its own.
fn supervisor_log(kind: Kind) {
    let engine = Engine::start(kind);
    let image = engine.test_image();
    let (_dir, harness) = harness("echo ran", 1, "");
    let h = harness.to_str().unwrap();
    let kept_sandbox = || {
        let out = engine
            .command(binary("pitcrew"))
            .args(["run", h, "--engine", kind.name(), "--image", &image.tag])
            .args(["--keep", "--json", "--pass-env", "RUST_LOG"])
            .env("RUST_LOG", "info")
            .output()
            .expect("pitcrew");
        let doc = json_of(&out);
        assert_eq!(doc["exit_code"], 0, "{doc:#}");
        doc["sandbox"].as_str().unwrap().to_string()
    };
    let ok = |args: &[&str]| {
        let out = pitcrew(&engine, args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{args:?}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let follow = |id: &str| {
        engine
            .command(binary("pitcrew"))
            .args(["logs", id, "--follow"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("pitcrew logs --follow")
    };
    let finished = |child: std::process::Child| {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "logs --follow: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };

    // Removed: the log is there while it runs; following it ends with `down`.
    let id = kept_sandbox();
    let printed = ok(&["logs", &id]);
    assert!(printed.contains("serve: listening on"), "{printed}");
    assert!(printed.contains("iteration 1: exit 0"), "{printed}");
    let json = ok(&["logs", &id, "--json"]);
    let mut lines = String::new();
    for object in json.lines() {
        let v: Value = serde_json::from_str(object).unwrap();
        assert_eq!(v["sandbox"], id.as_str(), "{object}");
        lines.push_str(v["line"].as_str().unwrap());
        lines.push('\n');
    }
    assert_eq!(lines, printed);
    let following = follow(&id);
    ok(&["down", &id]);
    let followed = finished(following);
    assert!(followed.starts_with(&printed), "{followed}");
    let out = pitcrew(&engine, &["logs", &id, "--engine", kind.name()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&id),
        "{out:?}"
    );

    // Stopped: following ends with the supervisor, and the stopped container keeps the log.
    let id = kept_sandbox();
    let following = follow(&id);
    ok(&["down", &id, "--keep"]);
    let followed = finished(following);
    let after = ok(&["logs", &id]);
    assert!(after.contains("serve: listening on"), "{after}");
    assert!(after.contains("shutting down"), "{after}");
    assert_eq!(followed, after);
    ok(&["down", &id]);
}

#[test]
fn logs_prints_and_follows_a_podman_sandboxs_supervisor_log() {
    if engines::require(Kind::Podman) && test_image_buildable() {
        supervisor_log(Kind::Podman);
    }
}

#[test]
fn logs_prints_and_follows_a_docker_sandboxs_supervisor_log() {
    if engines::require(Kind::Docker) && test_image_buildable() {
        supervisor_log(Kind::Docker);
    }
}

/// The offline test image is built with podman from a static busybox.
fn test_image_buildable() -> bool {
    pitcrew_e2e::prerequisite(
        pitcrew_e2e::container::podman_usable(),
        "needs podman and a static busybox to build the offline test image (.ci/run installs \
         podman and busybox-static)",
    )
}
