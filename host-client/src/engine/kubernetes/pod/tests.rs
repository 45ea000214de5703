//! Unit tests of the Pod document.

use super::*;

fn spec() -> PodSpec<'static> {
    PodSpec {
        id: "pk-1a2b3c4d",
        image: "registry.example/pitcrew-pi:1",
        memory_bytes: 1 << 30,
        serve_args: Vec::new(),
    }
}

#[test]
fn upload_limits_become_the_containers_serve_arguments_and_nothing_else_does() {
    let t = parse_template(DEFAULT_TEMPLATE, "default").unwrap();
    let pod = super::pod(&t, &spec()).unwrap();
    assert!(
        pod["spec"]["containers"][0].get("args").is_none(),
        "{pod:#}"
    );
    let mut with = spec();
    with.serve_args = vec!["--upload-max-entries".into(), "2000000".into()];
    let pod = super::pod(&t, &with).unwrap();
    assert_eq!(
        pod["spec"]["containers"][0]["args"],
        serde_json::json!(["serve", "--upload-max-entries", "2000000"])
    );
}

#[test]
fn the_default_template_becomes_a_confined_pod_pitcrew_init_runs_as_pid_1_of() {
    let t = parse_template(DEFAULT_TEMPLATE, "default").unwrap();
    let p = pod(&t, &spec()).unwrap();
    assert_eq!(p["metadata"]["name"], "pk-1a2b3c4d");
    assert_eq!(p["metadata"]["labels"]["pitcrew.sandbox"], "pk-1a2b3c4d");
    assert_eq!(p["metadata"]["labels"]["pitcrew.engine"], "kubernetes");
    assert_eq!(p["spec"]["restartPolicy"], "Never");
    assert_eq!(p["spec"]["automountServiceAccountToken"], false);
    assert_eq!(p["spec"]["shareProcessNamespace"], false);
    // Nothing pitcrew did not mean to write (a pod-level securityContext: null).
    assert!(p["spec"].get("securityContext").is_none(), "{p:#}");
    let c = &p["spec"]["containers"][0];
    assert_eq!(c["name"], "sandbox");
    assert_eq!(c["image"], "registry.example/pitcrew-pi:1");
    assert!(c.get("command").is_none() && c.get("args").is_none());
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["privileged"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(sc["capabilities"]["add"].as_array().unwrap().len(), 7);
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(c["resources"]["limits"]["memory"], "1073741824");
    assert_eq!(c["resources"]["requests"]["memory"], "1073741824");
    // The template's own request stays.
    assert_eq!(c["resources"]["requests"]["cpu"], "250m");
    let mounts: Vec<&str> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    assert_eq!(mounts, ["/pitcrew", "/var/lib/pitcrew", "/run", "/tmp"]);
}

#[test]
fn a_users_template_keeps_its_own_fields_and_loses_what_pitcrew_owns() {
    let t = parse_template(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: chosen-by-user
  labels: {team: agents, pitcrew.sandbox: forged}
  annotations: {note: "kept"}
spec:
  runtimeClassName: gvisor
  nodeSelector: {pool: sandboxes}
  tolerations: [{key: sandbox, operator: Exists, effect: NoSchedule}]
  automountServiceAccountToken: true
  securityContext: {runAsUser: 1000, fsGroup: 2000}
  volumes: [{name: cache, emptyDir: {}}]
  containers:
    - name: sandbox
      image: ignored
      command: [sh]
      env: [{name: HTTPS_PROXY, value: "http://proxy:3128"}]
      volumeMounts: [{name: cache, mountPath: /cache}]
      securityContext:
        privileged: true
        runAsUser: 1000
        seccompProfile: {type: Localhost, localhostProfile: profiles/agent.json}
      resources: {limits: {cpu: "2", memory: 1Ki}}
"#,
        "t.yaml",
    )
    .unwrap();
    let p = pod(&t, &spec()).unwrap();
    assert_eq!(p["metadata"]["name"], "pk-1a2b3c4d");
    assert_eq!(p["metadata"]["labels"]["team"], "agents");
    assert_eq!(p["metadata"]["labels"]["pitcrew.sandbox"], "pk-1a2b3c4d");
    assert_eq!(p["metadata"]["annotations"]["note"], "kept");
    assert_eq!(p["spec"]["runtimeClassName"], "gvisor");
    assert_eq!(p["spec"]["nodeSelector"]["pool"], "sandboxes");
    assert_eq!(p["spec"]["tolerations"][0]["key"], "sandbox");
    assert_eq!(p["spec"]["automountServiceAccountToken"], false);
    assert!(p["spec"]["securityContext"].get("runAsUser").is_none());
    assert_eq!(p["spec"]["securityContext"]["fsGroup"], 2000);
    let c = &p["spec"]["containers"][0];
    assert_eq!(c["image"], "registry.example/pitcrew-pi:1");
    assert!(c.get("command").is_none());
    assert_eq!(c["env"][0]["name"], "HTTPS_PROXY");
    assert_eq!(c["securityContext"]["privileged"], false);
    assert!(c["securityContext"].get("runAsUser").is_none());
    assert_eq!(c["securityContext"]["seccompProfile"]["type"], "Localhost");
    assert_eq!(c["resources"]["limits"]["cpu"], "2");
    assert_eq!(c["resources"]["limits"]["memory"], "1073741824");
    assert_eq!(p["spec"]["volumes"][0]["name"], "cache");
    assert_eq!(c["volumeMounts"][0]["mountPath"], "/cache");
}

#[test]
fn templates_that_would_undo_the_sandbox_are_refused() {
    let base = parse_template(DEFAULT_TEMPLATE, "default").unwrap();
    let cases: [(&str, Value, &str); 6] = [
        ("/spec/hostPID", json!(true), "hostPID"),
        ("/spec/shareProcessNamespace", json!(true), "not PID 1"),
        (
            "/spec/containers",
            json!([{"name": "sandbox"}, {"name": "sidecar"}]),
            "exactly one container",
        ),
        (
            "/spec/volumes",
            json!([{"name": "pitcrew-records", "emptyDir": {}}]),
            "is pitcrew's",
        ),
        (
            "/spec/containers",
            json!([{"name": "sandbox", "volumeMounts": [{"name": "x", "mountPath": "/pitcrew"}]}]),
            "is pitcrew's",
        ),
        (
            "/spec/containers",
            json!([{"name": "sandbox", "securityContext": {"seccompProfile": {"type": "Unconfined"}}}]),
            "seccompProfile Unconfined",
        ),
    ];
    for (path, value, says) in cases {
        let mut t = base.clone();
        let (parent, key) = path.rsplit_once('/').unwrap();
        t.pointer_mut(parent)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .insert(key.into(), value);
        let err = pod(&t, &spec()).unwrap_err();
        assert!(err.contains(says), "{path}: {err}");
    }
    assert!(
        parse_template("apiVersion: apps/v1\nkind: Deployment\n", "d.yaml")
            .unwrap_err()
            .contains("not a Pod")
    );
    assert!(parse_template("kind: [", "bad.yaml")
        .unwrap_err()
        .starts_with("bad.yaml: "));
}
