//! A real container: the offline test image (`images/test/Containerfile`, built by
//! `scripts/build-test-image`) runs `pitcrew-init` as its PID 1, and `pitcrew run --engine exec`
//! reaches it through the default template `podman exec -i {sandbox} pitcrew-init attach`.
//!
//! Needs root, podman and a static busybox (`.ci/run` installs them); skipped otherwise, or a
//! failure with `PITCREW_REQUIRE_E2E=1`. The container helpers are `pitcrew_e2e::container`.

use pitcrew_e2e::container::{containers_conf, podman, podman_usable, Container};
use pitcrew_e2e::{binary, prerequisite, read_json};
use serde_json::Value;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::process::Command;

fn gate() -> bool {
    prerequisite(
        podman_usable(),
        "needs root, podman and busybox-static (.ci/run installs them)",
    )
}

#[test]
fn a_podman_container_runs_verifies_and_reaps_through_the_default_exec_template() {
    if !gate() {
        return;
    }
    let container = Container::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::set_permissions(root, fs::Permissions::from_mode(0o755)).unwrap();
    fs::create_dir_all(root.join("plugins/p")).unwrap();
    fs::write(
        root.join("plugins/p/index.js"),
        "module.exports = () => {};\n",
    )
    .unwrap();
    fs::create_dir_all(root.join("adapters")).unwrap();
    fs::write(root.join("adapters/hooks.json"), "{ \"hooks\": {} }\n").unwrap();
    fs::create_dir_all(root.join("workspace")).unwrap();
    // Iteration 1 leaves a process behind; the host's validation command then tampers with the
    // plugin inside the container (as root, from outside the agent) and asks for another
    // iteration, which must reap the leftover and refuse to launch (96).
    let yaml = format!(
        r#"runtime: command
command:
  - /bin/sh
  - -c
  - |
    echo "uid $(id -u) pid1 $(cat /proc/1/cmdline | tr '\0' ' ')"
    setsid sleep 987654 </dev/null >/dev/null 2>&1 &
plugins:
  - plugins/p
adapters:
  - path: adapters/hooks.json
    role: hook-adapter
iterations: 2
timeout: 60s
workdir: workspace
validation:
  - /bin/sh
  - -c
  - podman exec {name} sh -c 'echo tampered >> /pitcrew/plugins/p/index.js'; exit 1
"#,
        name = container.name
    );
    fs::write(root.join("harness.yaml"), yaml).unwrap();
    let out = Command::new(binary("pitcrew"))
        .args(["run", root.join("harness.yaml").to_str().unwrap(), "--json"])
        .args(["--engine", "exec", "--sandbox", &container.name])
        .env("CONTAINERS_CONF", containers_conf())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let doc: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("no JSON ({e}): {stderr}"));
    assert_eq!(out.status.code(), Some(96), "{doc:#}\n{stderr}");
    let run_dir = PathBuf::from(doc["run_dir"].as_str().unwrap());

    // Iteration 1 ran confined in the container, under pitcrew-init as PID 1.
    let first = fs::read_to_string(run_dir.join("iteration-1/output.jsonl")).unwrap();
    assert!(
        first.starts_with("uid 65534 pid1 /usr/local/bin/pitcrew-init"),
        "{first}"
    );
    let r1 = read_json(&run_dir.join("iteration-1/result.json"));
    assert_eq!(r1["exit_code"], 0, "{r1}");
    assert_eq!(r1["supervisor"]["mode"], "pid1", "{r1}");

    // Iteration 2: the leftover was reaped, the tampered plugin named, nothing launched.
    let r2 = read_json(&run_dir.join("iteration-2/result.json"));
    assert_eq!(r2["exit_code"], 96, "{r2}");
    assert!(
        r2["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("index.js"),
        "{r2}"
    );
    assert!(r2["agent"].is_null(), "{r2}");
    let caught = r1["reaped"]["after"].as_u64().unwrap() + r2["reaped"]["before"].as_u64().unwrap();
    assert!(caught >= 1, "the leftover was not reaped: {r1} {r2}");
    let ps = podman(&["exec", &container.name, "ps", "-o", "args"]);
    assert!(
        !String::from_utf8_lossy(&ps.stdout).contains("987654"),
        "{}",
        String::from_utf8_lossy(&ps.stdout)
    );

    // The container is its creator's: the run left it running, `down` refuses it, and
    // `down --force` only stops its supervisor (PID 1 exits, the container stops, and stays).
    let down = |force: bool| {
        let mut cmd = Command::new(binary("pitcrew"));
        cmd.args(["down", &container.name, "--engine", "exec"])
            .env("CONTAINERS_CONF", containers_conf());
        if force {
            cmd.arg("--force");
        }
        cmd.output().unwrap()
    };
    let state = |name: &str| {
        let out = podman(&["inspect", "--format", "{{.State.Status}}", name]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(state(&container.name), "running");
    let out = down(false);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("pitcrew did not create it"),
        "{out:?}"
    );
    assert_eq!(state(&container.name), "running");
    let out = down(true);
    assert!(out.status.success(), "{out:?}");
    assert!(
        pitcrew_e2e::busy_wait(std::time::Duration::from_secs(20), || state(
            &container.name
        ) == "exited"),
        "{}",
        state(&container.name)
    );
}
