//! The kubernetes engine, end to end, against the stand-in `kubectl` of
//! `tests/kubectl-standin/` (no cluster can run on this machine): the real `pitcrew` creates a
//! Pod of the production image, waits for it, drives three iterations through `kubectl exec -i
//! … pitcrew-init attach`, collects and deletes it; a kept Pod is listed, inspected, driven
//! again, collected from, sent a cancel and brought down by its id; the Pod document
//! round-trips unchanged through the Kubernetes API's Pod type (`k8s-openapi`); a Pod whose
//! image cannot be pulled is one line naming why, and is deleted; a template that smuggles a
//! sidecar or a node path is refused before the cluster is asked for anything.
//!
//! Needs root, podman and python3 (the stand-in); skipped otherwise, or a failure with
//! `PITCREW_REQUIRE_E2E=1`.

use pitcrew_e2e::container::repo;
use pitcrew_e2e::engines::{self, Engine, Kind};
use pitcrew_e2e::{binary, iteration_dir, pitcrew_run_output, read_json, write_command_harness};
use serde_json::Value;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Output};

/// `PATH` with the stand-in first, its state dir, and podman's configuration.
fn standin_env(engine: &Engine, state: &Path) -> Vec<(String, String)> {
    let path = format!(
        "{}:{}",
        repo().join("tests/kubectl-standin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    engine.env_with(&[
        ("PATH", &path),
        ("PITCREW_KUBECTL_STATE", &state.display().to_string()),
    ])
}

fn pitcrew(env: &[(String, String)], args: &[&str]) -> Output {
    Command::new(binary("pitcrew"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap()
}

/// The Pods the stand-in holds (its state files), by name.
fn pods(state: &Path) -> Vec<String> {
    let dir = state.join("default");
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .strip_suffix(".json")
                .map(String::from)
        })
        .collect()
}

/// Removes the containers of the Pods the stand-in still holds when a test ends, passed or
/// not (a failed assertion must not leave containers on the machine).
struct RemovePods<'a>(&'a Engine, &'a Path);

impl Drop for RemovePods<'_> {
    fn drop(&mut self) {
        for name in pods(self.1) {
            let _ = self.0.cli(&[
                "rm",
                "--force",
                "--volumes",
                "--time",
                "0",
                &format!("k8s_default_{name}"),
            ]);
        }
    }
}

/// The Pod document as `kubectl create` received it must survive a round trip through the
/// Kubernetes API's Pod type: every field known to the API, of the API's type.
fn assert_valid_pod(doc: &Value) {
    let mut doc = doc.clone();
    doc.as_object_mut().unwrap().remove("_standin_waiting");
    let typed: k8s_openapi::api::core::v1::Pod =
        serde_json::from_value(doc.clone()).unwrap_or_else(|e| panic!("not a Pod: {e}\n{doc:#}"));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(back, doc, "fields the Pod API does not know were dropped");
}

#[test]
fn the_kubernetes_engine_runs_keeps_lists_drives_and_deletes_pods() {
    if !engines::require(Kind::Podman) {
        return;
    }
    let engine = Engine::start(Kind::Podman);
    let image = engine.image("pi");
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let kube = dir.path().join("kube");
    fs::create_dir(&kube).unwrap();
    let _cleanup = RemovePods(&engine, &kube);
    let env = standin_env(&engine, &kube);
    let env_ref: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let probe =
        "grep -E '^(NoNewPrivs|CapEff)' /proc/self/status; tr '\\0' ' ' < /proc/1/cmdline; echo";
    let harness = write_command_harness(dir.path(), probe, 3, "60s", false, "");
    let state = dir.path().join("state");
    fs::create_dir(&state).unwrap();

    // Three iterations in a Pod the run creates and deletes.
    let (out, doc) = pitcrew_run_output(
        &harness,
        &state,
        &["--engine", "kubernetes", "--image", &image],
        &env_ref,
    );
    assert!(
        out.status.success(),
        "{doc:#}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = doc["sandbox"].as_str().unwrap().to_string();
    assert!(id.starts_with("pk-"), "{id}");
    for n in 1..=3 {
        let it = iteration_dir(&doc, n);
        let record = read_json(&it.join("result.json"));
        assert_eq!(record["exit_code"], 0, "{record:#}");
        assert_eq!(record["supervisor"]["mode"], "pid1", "{record:#}");
        let seen = fs::read_to_string(it.join("output.jsonl")).unwrap();
        assert!(seen.contains("NoNewPrivs:\t1"), "{seen}");
        assert!(seen.contains("CapEff:\t0000000000000000"), "{seen}");
        assert!(seen.contains("/usr/local/bin/pitcrew-init"), "{seen}");
    }
    assert_eq!(pods(&kube), Vec::<String>::new(), "the Pod was left");

    // Kept: listed, inspected and driven again by id (no --engine), then brought down.
    let (out, doc) = pitcrew_run_output(
        &harness,
        &state,
        &[
            "--engine",
            "kubernetes",
            "--image",
            &image,
            "--keep",
            "--iterations",
            "1",
        ],
        &env_ref,
    );
    assert!(out.status.success(), "{doc:#}");
    let id = doc["sandbox"].as_str().unwrap().to_string();
    let stored = read_json(&kube.join(format!("default/{id}.json")));
    assert_valid_pod(&stored);
    let ps = pitcrew(&env, &["ps", "--engine", "kubernetes", "--json"]);
    let listed: Value = serde_json::from_slice(&ps.stdout).unwrap();
    assert_eq!(listed[0]["id"], id.as_str(), "{listed:#}");
    assert_eq!(listed[0]["engine"], "kubernetes", "{listed:#}");
    assert_eq!(
        listed[0]["detail"]["labels"]["pitcrew.sandbox"],
        id.as_str()
    );
    let inspect = pitcrew(&env, &["inspect", &id, "--json"]);
    assert!(inspect.status.success(), "{inspect:?}");
    let shown: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(
        shown["status"]["history"].as_array().unwrap().len(),
        1,
        "{shown:#}"
    );
    let (out, again) = pitcrew_run_output(
        &harness,
        &state,
        &["--sandbox", &id, "--iterations", "1"],
        &env_ref,
    );
    assert!(out.status.success(), "{again:#}");
    assert_eq!(again["iterations"][0]["iteration"], 2, "{again:#}");
    let fetched = dir.path().join("fetched");
    let collect = pitcrew(
        &env,
        &[
            "collect",
            &id,
            "--iteration",
            "1",
            "--out",
            fetched.to_str().unwrap(),
        ],
    );
    assert!(collect.status.success(), "{collect:?}");
    assert_eq!(
        read_json(&fetched.join("iteration-1/result.json"))["iteration"],
        1
    );
    // Nothing runs: the cancel reaches the supervisor, cancels nothing and says so (exit 1).
    let cancel = pitcrew(&env, &["cancel", &id, "--json"]);
    assert_eq!(cancel.status.code(), Some(1), "{cancel:?}");
    let said: Value = serde_json::from_slice(&cancel.stdout).unwrap();
    assert_eq!(said["detail"]["cancelled"], false, "{said:#}");
    let down = pitcrew(&env, &["down", &id]);
    assert!(down.status.success(), "{down:?}");
    assert_eq!(pods(&kube), Vec::<String>::new());
    let gone = pitcrew(&env, &["inspect", &id]);
    assert!(!gone.status.success());
}

#[test]
fn a_pod_that_never_starts_is_one_line_naming_why_and_is_deleted() {
    if !engines::require(Kind::Podman) {
        return;
    }
    let engine = Engine::start(Kind::Podman);
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let kube = dir.path().join("kube");
    fs::create_dir(&kube).unwrap();
    let _cleanup = RemovePods(&engine, &kube);
    let env = standin_env(&engine, &kube);
    let harness = write_command_harness(dir.path(), "true", 1, "60s", false, "");
    let out = pitcrew(
        &env,
        &[
            "run",
            harness.to_str().unwrap(),
            "--engine",
            "kubernetes",
            "--image",
            "localhost/pitcrew-no-such-image:1",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("did not start: container sandbox: ErrImagePull"),
        "{stderr}"
    );
    assert_eq!(pods(&kube), Vec::<String>::new(), "the Pod was left");

    // A template that would undo the sandbox is refused before anything is created.
    let template = dir.path().join("pod.yaml");
    fs::write(
        &template,
        "apiVersion: v1\nkind: Pod\nspec:\n  shareProcessNamespace: true\n  containers: [{name: sandbox}]\n",
    )
    .unwrap();
    let out = pitcrew(
        &env,
        &[
            "run",
            harness.to_str().unwrap(),
            "--engine",
            "kubernetes",
            "--image",
            "localhost/pitcrew-pi:e2e",
            "--pod-template",
            template.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!(
            "pod template {}: spec.shareProcessNamespace: true would make pitcrew-init not PID 1",
            template.display()
        )),
        "{out:?}"
    );
    assert_eq!(pods(&kube), Vec::<String>::new());
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_container_engine__a_template_smuggling_a_sidecar_or_a_node_path_never_reaches_the_cluster(
) {
    if !engines::require(Kind::Podman) {
        return;
    }
    let engine = Engine::start(Kind::Podman);
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let kube = dir.path().join("kube");
    fs::create_dir(&kube).unwrap();
    let _cleanup = RemovePods(&engine, &kube);
    let env = standin_env(&engine, &kube);
    let harness = write_command_harness(dir.path(), "true", 1, "60s", false, "");
    let run = |template: &Path, more: &[&str]| {
        let mut args = vec![
            "run",
            harness.to_str().unwrap(),
            "--engine",
            "kubernetes",
            "--image",
            "localhost/pitcrew-no-such-image:1",
            "--pod-template",
            template.to_str().unwrap(),
        ];
        args.extend(more);
        pitcrew(&env, &args)
    };

    // A native sidecar, privileged, on the node's root and pitcrew's uploads: refused before
    // kubectl is asked for anything, naming the file and the field.
    let sidecar = dir.path().join("sidecar.yaml");
    fs::write(
        &sidecar,
        "apiVersion: v1\nkind: Pod\nspec:\n  volumes: [{name: node, hostPath: {path: /}}]\n  \
         initContainers:\n  - name: side\n    image: busybox\n    restartPolicy: Always\n    \
         securityContext: {privileged: true}\n    volumeMounts: [{name: node, mountPath: /node}, \
         {name: x, mountPath: //pitcrew/plugins}]\n  containers: [{name: sandbox}]\n",
    )
    .unwrap();
    let out = run(&sidecar, &["--allow-host-path", "/"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "pod template {}: spec.initContainers[0].restartPolicy: \"Always\" is refused",
            sidecar.display()
        )),
        "{stderr}"
    );
    assert_eq!(pods(&kube), Vec::<String>::new());

    // A node path: refused unless the command line names it; named, the Pod document carries
    // it to kubectl (which the stand-in refuses: it runs emptyDir volumes only).
    let node = dir.path().join("node.yaml");
    fs::write(
        &node,
        "apiVersion: v1\nkind: Pod\nspec:\n  volumes: [{name: models, hostPath: {path: /srv/models}}]\n  \
         containers: [{name: sandbox, volumeMounts: [{name: models, mountPath: /models}]}]\n",
    )
    .unwrap();
    let out = run(&node, &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "pod template {}: spec.volumes[0].hostPath: the node's \"/srv/models\" in the sandbox's Pod is refused unless the command line allows it (--allow-host-path /srv/models)",
            node.display()
        )),
        "{stderr}"
    );
    let out = run(&node, &["--allow-host-path", "/srv/models/"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("kubectl stand-in: volume models: only emptyDir is supported"),
        "{stderr}"
    );
    assert_eq!(pods(&kube), Vec::<String>::new());
}
