//! The Pod document of a sandbox: the template (`images/kubernetes/pod.yaml`, or the user's)
//! with what pitcrew owns filled in and enforced; everything else of the template kept.

use super::super::container::{
    CAPABILITIES, LABEL_ENGINE, LABEL_SANDBOX, LABEL_VERSION, ROOT, STATE,
};
use serde_json::{json, Map, Value};

/// The container that runs `pitcrew-init`.
pub const CONTAINER: &str = "sandbox";
/// The default template, built in.
pub const DEFAULT_TEMPLATE: &str = include_str!("../../../../images/kubernetes/pod.yaml");

/// The volumes pitcrew mounts (name, mount path, in memory).
const VOLUMES: [(&str, &str, bool); 4] = [
    ("pitcrew-uploads", ROOT, false),
    ("pitcrew-records", STATE, false),
    ("pitcrew-run", "/run", true),
    ("pitcrew-tmp", "/tmp", true),
];

/// What the Pod of one sandbox is made of.
pub struct PodSpec<'a> {
    /// The sandbox id (the Pod's name).
    pub id: &'a str,
    /// The image.
    pub image: &'a str,
    /// The container's memory request and limit, in bytes.
    pub memory_bytes: u64,
    /// `pitcrew-init serve` options beyond its defaults (the container's `args` after `serve`).
    pub serve_args: Vec<String>,
}

/// Parses a template (YAML or JSON), naming `what` in errors.
pub fn parse_template(text: &str, what: &str) -> Result<Value, String> {
    let v: Value = serde_norway::from_str(text).map_err(|e| format!("{what}: {e}"))?;
    if v["apiVersion"] != "v1" || v["kind"] != "Pod" {
        return Err(format!("{what}: not a Pod (apiVersion v1, kind Pod)"));
    }
    Ok(v)
}

/// A mapping at `v[key]`, made when absent; an error naming `at` when it is something else.
fn object<'v>(v: &'v mut Value, key: &str, at: &str) -> Result<&'v mut Map<String, Value>, String> {
    let obj = v
        .as_object_mut()
        .ok_or_else(|| format!("pod template: {at} is not a mapping"))?;
    let entry = obj.entry(key).or_insert_with(|| json!({}));
    if entry.is_null() {
        *entry = json!({});
    }
    entry
        .as_object_mut()
        .ok_or_else(|| format!("pod template: {at}.{key} is not a mapping"))
}

/// The Pod for `spec` from `template`: refuses a template that asks for what would undo the
/// sandbox (privileged, host namespaces, process namespace sharing, an unconfined seccomp
/// profile, a volume or mount that claims pitcrew's paths), then sets what pitcrew owns.
pub fn pod(template: &Value, spec: &PodSpec) -> Result<Value, String> {
    let mut pod = template.clone();
    let refuse = |what: &str| Err(format!("pod template: {what}"));
    for (key, why) in [
        (
            "hostPID",
            "hostPID would show the node's processes to the agent",
        ),
        (
            "hostIPC",
            "hostIPC would share the node's IPC with the agent",
        ),
        (
            "hostNetwork",
            "hostNetwork would put the agent on the node's network",
        ),
        (
            "shareProcessNamespace",
            "shareProcessNamespace would make pitcrew-init not PID 1",
        ),
    ] {
        if pod["spec"][key] == true {
            return refuse(why);
        }
    }
    let meta = object(&mut pod, "metadata", "the Pod")?;
    meta.insert("name".into(), json!(spec.id));
    meta.remove("generateName");
    let labels = object(&mut pod["metadata"], "labels", "metadata")?;
    labels.insert(LABEL_SANDBOX.into(), json!(spec.id));
    labels.insert(LABEL_ENGINE.into(), json!("kubernetes"));
    labels.insert(LABEL_VERSION.into(), json!(env!("CARGO_PKG_VERSION")));

    let s = object(&mut pod, "spec", "the Pod")?;
    s.insert("restartPolicy".into(), json!("Never"));
    s.insert("automountServiceAccountToken".into(), json!(false));
    s.insert("enableServiceLinks".into(), json!(false));
    for key in ["hostPID", "hostIPC", "hostNetwork", "shareProcessNamespace"] {
        s.insert(key.into(), json!(false));
    }
    // Volumes: pitcrew's four, and the template's others (never one of pitcrew's names).
    let volumes = s.entry("volumes").or_insert_with(|| json!([]));
    let volumes = volumes
        .as_array_mut()
        .ok_or("pod template: spec.volumes is not a list")?;
    if let Some(v) = volumes
        .iter()
        .find(|v| VOLUMES.iter().any(|(n, _, _)| v["name"] == *n))
    {
        return refuse(&format!("volume {} is pitcrew's", v["name"]));
    }
    for (name, _, memory) in VOLUMES {
        let empty = if memory {
            json!({"medium": "Memory"})
        } else {
            json!({})
        };
        volumes.push(json!({"name": name, "emptyDir": empty}));
    }

    let containers = s.entry("containers").or_insert_with(|| json!([]));
    let containers = containers
        .as_array_mut()
        .ok_or("pod template: spec.containers is not a list")?;
    if containers.len() > 1 || containers.iter().any(|c| c["name"] != CONTAINER) {
        return refuse(&format!(
            "exactly one container, named {CONTAINER:?} (another container would share the Pod's network and volumes with the agent unseen)"
        ));
    }
    if containers.is_empty() {
        containers.push(json!({"name": CONTAINER}));
    }
    let c = containers[0]
        .as_object_mut()
        .ok_or("pod template: the container is not a mapping")?;
    c.insert("image".into(), json!(spec.image));
    // The image's entrypoint is pitcrew-init: PID 1 of the container, serving (its default
    // command) with the options the harness asks for.
    c.remove("command");
    c.remove("args");
    if !spec.serve_args.is_empty() {
        let args: Vec<&str> = std::iter::once("serve")
            .chain(spec.serve_args.iter().map(String::as_str))
            .collect();
        c.insert("args".into(), json!(args));
    }
    c.insert("stdin".into(), json!(false));
    c.insert("tty".into(), json!(false));
    if c.get("imagePullPolicy").is_none() {
        c.insert("imagePullPolicy".into(), json!("IfNotPresent"));
    }
    let mounts = c.entry("volumeMounts").or_insert_with(|| json!([]));
    let mounts = mounts
        .as_array_mut()
        .ok_or("pod template: volumeMounts is not a list")?;
    if let Some(m) = mounts.iter().find(|m| {
        VOLUMES
            .iter()
            .any(|(n, path, _)| m["name"] == *n || m["mountPath"] == *path)
    }) {
        return refuse(&format!(
            "the mount {} at {} is pitcrew's",
            m["name"], m["mountPath"]
        ));
    }
    for (name, path, _) in VOLUMES {
        mounts.push(json!({"name": name, "mountPath": path}));
    }

    let sc = c.entry("securityContext").or_insert_with(|| json!({}));
    let sc = sc
        .as_object_mut()
        .ok_or("pod template: securityContext is not a mapping")?;
    let profile = sc.get("seccompProfile").cloned().unwrap_or(Value::Null);
    let seccomp = match profile["type"].as_str() {
        None | Some("RuntimeDefault") => json!({"type": "RuntimeDefault"}),
        Some("Localhost") => profile,
        Some(other) => {
            return refuse(&format!(
                "seccompProfile {other} (RuntimeDefault or Localhost)"
            ))
        }
    };
    // pitcrew-init runs as the container's root to give the agent a uid of its own; an
    // AppArmor or SELinux profile of the template's stays.
    for key in ["runAsUser", "runAsGroup", "runAsNonRoot", "procMount"] {
        sc.remove(key);
    }
    sc.insert("privileged".into(), json!(false));
    sc.insert("allowPrivilegeEscalation".into(), json!(false));
    sc.insert("readOnlyRootFilesystem".into(), json!(true));
    sc.insert(
        "capabilities".into(),
        json!({"drop": ["ALL"], "add": CAPABILITIES}),
    );
    sc.insert("seccompProfile".into(), seccomp);

    let memory = json!(spec.memory_bytes.to_string());
    let res = c.entry("resources").or_insert_with(|| json!({}));
    let res = res
        .as_object_mut()
        .ok_or("pod template: resources is not a mapping")?;
    for part in ["requests", "limits"] {
        let m = res.entry(part).or_insert_with(|| json!({}));
        let m = m
            .as_object_mut()
            .ok_or_else(|| format!("pod template: resources.{part} is not a mapping"))?;
        m.insert("memory".into(), memory.clone());
    }
    // A pod-level securityContext of the template stays, but never a user other than root for
    // the container (its runAsUser would win over the container's absence of one).
    if let Some(psc) = pod
        .pointer_mut("/spec/securityContext")
        .and_then(Value::as_object_mut)
    {
        for key in ["runAsUser", "runAsGroup", "runAsNonRoot"] {
            psc.remove(key);
        }
    }
    Ok(pod)
}

#[cfg(test)]
mod tests;
