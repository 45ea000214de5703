//! Unit tests of the Pod document.

use super::*;

fn spec() -> PodSpec<'static> {
    PodSpec {
        id: "pk-1a2b3c4d",
        image: "registry.example/pitcrew-pi:1",
        memory_bytes: 1 << 30,
        serve_args: Vec::new(),
        allow_host_paths: &[],
    }
}

/// A template of `doc`, named `t.yaml` in errors.
fn template(doc: Value) -> Template {
    Template {
        name: "t.yaml".into(),
        doc,
    }
}

/// The error of the Pod from the template `doc`, which must be refused.
fn refused(doc: Value) -> String {
    match pod(&template(doc.clone()), &spec()) {
        Ok(p) => panic!("not refused: {doc:#}\nbecame {p:#}"),
        Err(e) => e,
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
        let mut t = template(base.doc.clone());
        let (parent, key) = path.rsplit_once('/').unwrap();
        t.doc
            .pointer_mut(parent)
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

/// The default template with `key` of its spec set to `value`.
fn with_spec(key: &str, value: Value) -> Value {
    let mut doc = parse_template(DEFAULT_TEMPLATE, "default").unwrap().doc;
    doc["spec"][key] = value;
    doc
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_container_engine__a_native_sidecar_init_container_is_refused() {
    // A sidecar that keeps running beside the agent, privileged, on the node's root.
    let err = refused(with_spec(
        "initContainers",
        json!([{"name": "side", "image": "busybox", "restartPolicy": "Always",
                "command": ["sleep", "inf"], "volumeMounts": [{"name": "node", "mountPath": "/node"}]}]),
    ));
    assert!(
        err.starts_with("pod template t.yaml: spec.initContainers[0].restartPolicy: \"Always\""),
        "{err}"
    );
    assert!(err.contains("native sidecar"), "{err}");
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_container_engine__an_init_container_mounting_pitcrews_volumes_is_refused() {
    for (j, name) in [
        "pitcrew-uploads",
        "pitcrew-records",
        "pitcrew-run",
        "pitcrew-tmp",
    ]
    .into_iter()
    .enumerate()
    {
        let mut mounts: Vec<Value> = (0..j)
            .map(|k| json!({"name": "cache", "mountPath": format!("/cache/{k}")}))
            .collect();
        mounts.push(json!({"name": name, "mountPath": "/x"}));
        let err = refused(with_spec(
            "initContainers",
            json!([{"name": "seed", "image": "busybox"},
                   {"name": "plant", "image": "busybox", "volumeMounts": mounts}]),
        ));
        assert_eq!(
            err,
            format!("pod template t.yaml: spec.initContainers[1].volumeMounts[{j}].name: the volume {name} is pitcrew's")
        );
    }
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_container_engine__a_privileged_init_container_is_refused() {
    for (context, field) in [
        (json!({"privileged": true}), "securityContext.privileged"),
        (
            json!({"allowPrivilegeEscalation": true}),
            "securityContext.allowPrivilegeEscalation",
        ),
        (
            json!({"capabilities": {"add": ["SYS_ADMIN"]}}),
            "securityContext.capabilities.add",
        ),
    ] {
        let err = refused(with_spec(
            "initContainers",
            json!([{"name": "init", "image": "busybox", "securityContext": context}]),
        ));
        assert!(
            err.starts_with(&format!(
                "pod template t.yaml: spec.initContainers[0].{field}: "
            )),
            "{err}"
        );
    }
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_container_engine__ephemeral_containers_are_refused() {
    let err = refused(with_spec(
        "ephemeralContainers",
        json!([{"name": "debug", "image": "busybox", "targetContainerName": "sandbox"}]),
    ));
    assert!(
        err.starts_with("pod template t.yaml: spec.ephemeralContainers: "),
        "{err}"
    );
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_container_engine__mounts_spelled_around_pitcrews_paths_are_refused() {
    // What follows the quoted path in the refusal.
    for (path, says) in [
        ("/pitcrew/plugins", "is inside pitcrew's /pitcrew"),
        ("/pitcrew/", "is pitcrew's /pitcrew"),
        ("//var/lib/pitcrew", "is pitcrew's /var/lib/pitcrew"),
        (
            "/var/lib/./pitcrew/records",
            "is inside pitcrew's /var/lib/pitcrew",
        ),
        ("/./run//pitcrew", "is inside pitcrew's /run"),
        ("/tmp/", "is pitcrew's /tmp"),
        ("/var/lib", "holds pitcrew's /var/lib/pitcrew"),
        ("/", "holds pitcrew's /pitcrew"),
        (
            "/var/run/pitcrew",
            "is inside pitcrew's /var/run (a link to /run in the image)",
        ),
        (
            "/var/lock",
            "is pitcrew's /var/lock (a link to /run/lock in the image)",
        ),
        ("/cache/../pitcrew", "has a `..` component"),
        ("pitcrew", "is not an absolute path"),
    ] {
        let mount = json!({"name": "cache", "mountPath": path});
        let volumes = json!([{"name": "cache", "emptyDir": {}}]);
        // In the sandbox container, after a mount that is fine.
        let mut doc = with_spec("volumes", volumes.clone());
        doc["spec"]["containers"][0]["volumeMounts"] =
            json!([{"name": "cache", "mountPath": "/cache"}, mount]);
        assert_eq!(
            refused(doc),
            format!("pod template t.yaml: spec.containers[0].volumeMounts[1].mountPath: {path:?} {says}")
        );
        // In an init container.
        let mut doc = with_spec("volumes", volumes);
        doc["spec"]["initContainers"] = json!([{"name": "init", "volumeMounts": [mount]}]);
        assert_eq!(
            refused(doc),
            format!("pod template t.yaml: spec.initContainers[0].volumeMounts[0].mountPath: {path:?} {says}")
        );
    }
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_container_engine__a_host_path_volume_is_refused_unless_the_command_line_allows_it() {
    let volumes = json!([
        {"name": "cache", "emptyDir": {}},
        {"name": "models", "hostPath": {"path": "/srv/models", "type": "Directory"}},
        {"name": "node", "hostPath": {"path": "/"}},
    ]);
    let doc = with_spec("volumes", volumes);
    let err = refused(doc.clone());
    assert_eq!(
        err,
        "pod template t.yaml: spec.volumes[1].hostPath: the node's \"/srv/models\" in the sandbox's Pod is refused unless the command line allows it (--allow-host-path /srv/models)"
    );
    // Allowing one node path allows that one only, however it is spelled in the template.
    let allowed = ["/srv/models".to_string()];
    let only = PodSpec {
        allow_host_paths: &allowed,
        ..spec()
    };
    let err = pod(&template(doc.clone()), &only).unwrap_err();
    assert!(
        err.starts_with("pod template t.yaml: spec.volumes[2].hostPath: the node's \"/\""),
        "{err}"
    );
    let mut spelled = doc;
    spelled["spec"]["volumes"][1]["hostPath"]["path"] = json!("//srv/./models/");
    spelled["spec"]["volumes"][2]["hostPath"]["path"] = json!("/srv/models/../..");
    let err = pod(&template(spelled), &only).unwrap_err();
    assert_eq!(
        err,
        "pod template t.yaml: spec.volumes[2].hostPath.path: \"/srv/models/../..\" has a `..` component"
    );
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_container_engine__commands_the_kubelet_runs_in_the_sandbox_container_are_refused() {
    let exec = json!({"exec": {"command": ["sh", "-c", "echo x >> /pitcrew/plugins/p/index.js"]}});
    for (key, value, field) in [
        (
            "lifecycle",
            json!({"postStart": exec}),
            "lifecycle.postStart.exec",
        ),
        (
            "lifecycle",
            json!({"preStop": exec}),
            "lifecycle.preStop.exec",
        ),
        ("livenessProbe", exec.clone(), "livenessProbe.exec"),
        ("readinessProbe", exec.clone(), "readinessProbe.exec"),
        ("startupProbe", exec.clone(), "startupProbe.exec"),
    ] {
        let mut doc = with_spec("volumes", json!([]));
        doc["spec"]["containers"][0][key] = value;
        let err = refused(doc);
        assert!(
            err.starts_with(&format!(
                "pod template t.yaml: spec.containers[0].{field}: "
            )),
            "{err}"
        );
    }
}

#[test]
fn host_namespaces_and_the_seccomp_profile_are_refused_naming_the_field() {
    for key in ["hostPID", "hostIPC", "hostNetwork", "shareProcessNamespace"] {
        let err = refused(with_spec(key, json!(true)));
        assert!(
            err.starts_with(&format!("pod template t.yaml: spec.{key}: true would ")),
            "{err}"
        );
    }
    let mut doc = with_spec("volumes", json!([]));
    doc["spec"]["containers"][0]["securityContext"] =
        json!({"seccompProfile": {"type": "Unconfined"}});
    assert!(refused(doc).starts_with(
        "pod template t.yaml: spec.containers[0].securityContext.seccompProfile.type: "
    ));
    for (key, value, says) in [
        (
            "initContainers",
            json!({}),
            "spec.initContainers: not a list",
        ),
        (
            "volumes",
            json!([{"name": "n", "hostPath": {}}]),
            "spec.volumes[0].hostPath.path: missing or not a string",
        ),
        (
            "initContainers",
            json!(["x"]),
            "spec.initContainers[0]: not a mapping",
        ),
    ] {
        assert_eq!(
            refused(with_spec(key, value)),
            format!("pod template t.yaml: {says}")
        );
    }
}

#[test]
fn a_benign_template_with_an_init_container_and_an_allowed_host_path_becomes_the_expected_pod() {
    let t = parse_template(
        r#"
apiVersion: v1
kind: Pod
metadata: {labels: {team: agents}}
spec:
  runtimeClassName: gvisor
  volumes:
    - {name: cache, emptyDir: {}}
    - {name: models, hostPath: {path: /srv/models/, type: Directory}}
  initContainers:
    - name: warm
      image: busybox
      command: [cp, -r, /models/., /cache/]
      securityContext: {allowPrivilegeEscalation: false, capabilities: {add: [], drop: [ALL]}}
      volumeMounts:
        - {name: models, mountPath: /models, readOnly: true}
        - {name: cache, mountPath: /cache}
  containers:
    - name: sandbox
      readinessProbe: {tcpSocket: {port: 8080}}
      volumeMounts:
        - {name: cache, mountPath: /var/cache/agent}
        - {name: models, mountPath: /opt/models/, readOnly: true}
"#,
        "benign.yaml",
    )
    .unwrap();
    let allowed = ["/srv/models".to_string()];
    let p = pod(
        &t,
        &PodSpec {
            allow_host_paths: &allowed,
            ..spec()
        },
    )
    .unwrap();
    let caps = json!(CAPABILITIES);
    let expected = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "pk-1a2b3c4d",
            "labels": {
                "team": "agents",
                "pitcrew.sandbox": "pk-1a2b3c4d",
                "pitcrew.engine": "kubernetes",
                "pitcrew.version": env!("CARGO_PKG_VERSION"),
            },
        },
        "spec": {
            "runtimeClassName": "gvisor",
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "hostPID": false,
            "hostIPC": false,
            "hostNetwork": false,
            "shareProcessNamespace": false,
            "volumes": [
                {"name": "cache", "emptyDir": {}},
                {"name": "models", "hostPath": {"path": "/srv/models/", "type": "Directory"}},
                {"name": "pitcrew-uploads", "emptyDir": {}},
                {"name": "pitcrew-records", "emptyDir": {}},
                {"name": "pitcrew-run", "emptyDir": {"medium": "Memory"}},
                {"name": "pitcrew-tmp", "emptyDir": {"medium": "Memory"}},
            ],
            "initContainers": [{
                "name": "warm",
                "image": "busybox",
                "command": ["cp", "-r", "/models/.", "/cache/"],
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"add": [], "drop": ["ALL"]}},
                "volumeMounts": [
                    {"name": "models", "mountPath": "/models", "readOnly": true},
                    {"name": "cache", "mountPath": "/cache"},
                ],
            }],
            "containers": [{
                "name": "sandbox",
                "image": "registry.example/pitcrew-pi:1",
                "imagePullPolicy": "IfNotPresent",
                "stdin": false,
                "tty": false,
                "readinessProbe": {"tcpSocket": {"port": 8080}},
                "volumeMounts": [
                    {"name": "cache", "mountPath": "/var/cache/agent"},
                    {"name": "models", "mountPath": "/opt/models/", "readOnly": true},
                    {"name": "pitcrew-uploads", "mountPath": "/pitcrew"},
                    {"name": "pitcrew-records", "mountPath": "/var/lib/pitcrew"},
                    {"name": "pitcrew-run", "mountPath": "/run"},
                    {"name": "pitcrew-tmp", "mountPath": "/tmp"},
                ],
                "securityContext": {
                    "privileged": false,
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"], "add": caps},
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "resources": {
                    "requests": {"memory": "1073741824"},
                    "limits": {"memory": "1073741824"},
                },
            }],
        },
    });
    assert_eq!(p, expected, "{p:#}");
}

#[test]
fn normal_paths_lose_doubled_slashes_dots_and_a_trailing_slash_and_refuse_dot_dot() {
    for (path, normal) in [
        ("/", "/"),
        ("//", "/"),
        ("/./", "/"),
        ("/pitcrew/", "/pitcrew"),
        ("//var//lib/./pitcrew/.", "/var/lib/pitcrew"),
        ("/a..b/.c", "/a..b/.c"),
    ] {
        assert_eq!(normal_path(path).as_deref(), Ok(normal), "{path}");
    }
    for path in ["", "pitcrew", "./pitcrew", "/a/../b", "/.."] {
        assert!(normal_path(path).is_err(), "{path}");
    }
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_container_engine__a_mount_through_a_symlink_an_init_container_planted_lands_on_pitcrews_paths(
) {
    // The init container (default privilege, no pitcrew volume) plants `a/x -> /var/lib/pitcrew`
    // in an emptyDir; the sandbox container mounts that emptyDir at /opt/a and a volume of the
    // template's (here a claim another Pod also mounts) at /opt/a/x. The runtime mounts by
    // depth and resolves the destination inside the root filesystem, following the planted
    // link (runc, seen under podman): the claim lands on /var/lib/pitcrew, over pitcrew's records
    // volume, though no mountPath names a pitcrew path.
    let mut doc = with_spec(
        "volumes",
        json!([{"name": "a", "emptyDir": {}},
               {"name": "shared", "persistentVolumeClaim": {"claimName": "elsewhere"}}]),
    );
    doc["spec"]["initContainers"] = json!([{
        "name": "plant", "image": "busybox",
        "command": ["ln", "-s", "/var/lib/pitcrew", "/a/x"],
        "volumeMounts": [{"name": "a", "mountPath": "/a"}]}]);
    doc["spec"]["containers"][0]["volumeMounts"] = json!([
        {"name": "a", "mountPath": "/opt/a"},
        {"name": "shared", "mountPath": "/opt/a/x"}]);
    let err = refused(doc);
    assert!(err.contains("/opt/a/x"), "{err}");
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_container_engine__a_template_runs_its_own_code_as_pid_1_through_env_or_a_mount() {
    // The init container writes a library (or a `pitcrew-init`) into an emptyDir.
    let init = json!([{"name": "build", "image": "busybox",
                       "command": ["sh", "-c", "cp /evil.so /lib-dir/"],
                       "volumeMounts": [{"name": "libs", "mountPath": "/lib-dir"}]}]);
    let volumes = json!([{"name": "libs", "emptyDir": {}}]);
    // (1) The sandbox container's environment preloads it into PID 1 (and every
    // `kubectl exec … pitcrew-init attach`): LD_PRELOAD, which `--pass-env` and every layer of
    // the agent's environment refuse.
    let mut doc = with_spec("volumes", volumes.clone());
    doc["spec"]["initContainers"] = init.clone();
    doc["spec"]["containers"][0]["env"] =
        json!([{"name": "LD_PRELOAD", "value": "/opt/libs/evil.so"}]);
    doc["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "libs", "mountPath": "/opt/libs"}]);
    let err = refused(doc);
    assert!(err.contains("LD_PRELOAD"), "{err}");
    // (2) The volume is mounted over the directory of the image's entrypoint: the Pod's PID 1
    // is the template's `pitcrew-init`, though `command` and `args` are removed.
    let mut doc = with_spec("volumes", volumes);
    doc["spec"]["initContainers"] = init;
    doc["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "libs", "mountPath": "/usr/local/bin"}]);
    let err = refused(doc);
    assert!(err.contains("/usr/local/bin"), "{err}");
}

#[test]
fn nested_mounts_are_refused_naming_both_fields_in_either_order_and_in_init_containers() {
    let mounts =
        |a: &str, b: &str| json!([{"name": "a", "mountPath": a}, {"name": "b", "mountPath": b}]);
    for (a, b, inner, outer, how) in [
        ("/opt/a", "/opt/a/x", "[1]", "[0]", "is inside"),
        ("/opt/a/x/", "//opt/a", "[0]", "[1]", "is inside"),
        ("/opt/a", "/opt/./a", "[1]", "[0]", "is also"),
    ] {
        for containers in ["containers", "initContainers"] {
            let mut doc = with_spec(
                "volumes",
                json!([{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}]),
            );
            let c = if containers == "containers" {
                &mut doc["spec"]["containers"][0]
            } else {
                doc["spec"]["initContainers"] = json!([{"name": "i", "image": "busybox"}]);
                &mut doc["spec"]["initContainers"][0]
            };
            c["volumeMounts"] = mounts(a, b);
            let err = refused(doc);
            let field = format!("spec.{containers}[0].volumeMounts");
            assert!(
                err.contains(&format!("{field}{inner}.mountPath: "))
                    && err.contains(how)
                    && err.contains(&format!("the mountPath of {field}{outer}")),
                "{err}"
            );
        }
    }
    // Siblings, and a prefix that is not a parent, stay.
    let mut doc = with_spec(
        "volumes",
        json!([{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}]),
    );
    doc["spec"]["containers"][0]["volumeMounts"] = mounts("/opt/a", "/opt/ab");
    pod(&template(doc), &spec()).unwrap();
}

#[test]
fn sub_path_expr_is_refused_and_sub_path_stays() {
    let mut doc = with_spec("volumes", json!([{"name": "a", "emptyDir": {}}]));
    doc["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "a", "mountPath": "/data", "subPathExpr": "$(POD_NAME)"}]);
    let err = refused(doc.clone());
    assert!(
        err.contains("spec.containers[0].volumeMounts[0].subPathExpr: refused"),
        "{err}"
    );
    doc["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "a", "mountPath": "/data", "subPath": "models"}]);
    let p = pod(&template(doc), &spec()).unwrap();
    assert_eq!(
        p["spec"]["containers"][0]["volumeMounts"][0]["subPath"],
        "models"
    );
}

#[test]
fn the_sandbox_containers_loader_variables_and_env_from_are_refused_and_other_env_stays() {
    let refuse = |env: Value, field: &str| {
        let mut doc = with_spec("volumes", json!([]));
        doc["spec"]["containers"][0]["env"] = env;
        let err = refused(doc);
        assert!(
            err.contains(&format!("spec.containers[0].{field}: ")),
            "{err}"
        );
    };
    refuse(
        json!([{"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
                  {"name": "NODE_OPTIONS", "value": "--require /opt/libs/x.js"}]),
        "env[1].name",
    );
    refuse(
        json!([{"name": "ld_preload", "value": "/x.so"}]),
        "env[0].name",
    );
    refuse(
        json!([{"name": "GLIBC_TUNABLES",
                "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]),
        "env[0].name",
    );
    refuse(json!([{"value": "x"}]), "env[0].name");
    let mut doc = with_spec("volumes", json!([]));
    doc["spec"]["containers"][0]["envFrom"] = json!([{"configMapRef": {"name": "c"}}]);
    let err = refused(doc);
    assert!(err.contains("spec.containers[0].envFrom: refused"), "{err}");
    // A proxy and its CA, and an init container's own loader variable, stay.
    let mut doc = with_spec("volumes", json!([]));
    let env = json!([{"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
                     {"name": "NODE_EXTRA_CA_CERTS", "value": "/certs/ca.pem"}]);
    doc["spec"]["containers"][0]["env"] = env.clone();
    doc["spec"]["initContainers"] = json!([{"name": "i", "image": "busybox",
        "env": [{"name": "LD_LIBRARY_PATH", "value": "/x"}], "envFrom": [{"secretRef": {"name": "s"}}]}]);
    let p = pod(&template(doc), &spec()).unwrap();
    assert_eq!(p["spec"]["containers"][0]["env"], env);
}

#[test]
fn sandbox_mounts_on_inside_or_above_the_images_system_directories_are_refused() {
    for (path, how, dir) in [
        ("/usr/local/bin", "is inside", "/usr"),
        ("/usr/", "is", "/usr"),
        ("/opt", "holds", "/opt/pitcrew"),
        ("/opt/pitcrew/agent", "is inside", "/opt/pitcrew"),
        ("/etc/ld.so.preload", "is inside", "/etc"),
        ("//lib64", "is", "/lib64"),
        ("/bin", "is", "/bin"),
        ("/root/.gitconfig", "is inside", "/root"),
        ("/proc/sys", "is inside", "/proc"),
        ("/dev", "is", "/dev"),
    ] {
        let mut doc = with_spec("volumes", json!([{"name": "a", "emptyDir": {}}]));
        doc["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "a", "mountPath": path}]);
        let err = refused(doc);
        assert!(
            err.contains(&format!(
                "spec.containers[0].volumeMounts[0].mountPath: {path:?} {how} the image's {dir}: "
            )),
            "{err}"
        );
    }
    // An init container's own image is the template's: its mounts there stay; so do the
    // sandbox's /dev/shm and paths beside the system directories.
    let mut doc = with_spec(
        "volumes",
        json!([{"name": "a", "emptyDir": {"medium": "Memory"}}]),
    );
    doc["spec"]["initContainers"] = json!([{"name": "i", "image": "busybox",
        "volumeMounts": [{"name": "a", "mountPath": "/usr/local/bin"}]}]);
    doc["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "a", "mountPath": "/dev/shm"},
        {"name": "a", "mountPath": "/opt/models"}, {"name": "a", "mountPath": "/usrx"}]);
    pod(&template(doc), &spec()).unwrap();
}
