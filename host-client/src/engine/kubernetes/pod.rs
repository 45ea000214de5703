//! The Pod document of a sandbox: the template (`images/kubernetes/pod.yaml`, or the user's)
//! with what pitcrew owns filled in and enforced; everything else of the template kept, once
//! [`check`] found nothing in it that would run or mount something beside the sandbox.

mod check;

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
    /// The node paths the template may mount as `hostPath` volumes (`--allow-host-path`), each
    /// as [`normal_path`] gives it.
    pub allow_host_paths: &'a [String],
}

/// A Pod template and the name its errors carry (the file, or the built-in one's path).
#[derive(Debug)]
pub struct Template {
    name: String,
    doc: Value,
}

/// Parses a template (YAML or JSON), naming `what` in errors.
pub fn parse_template(text: &str, what: &str) -> Result<Template, String> {
    let v: Value = serde_norway::from_str(text).map_err(|e| format!("{what}: {e}"))?;
    if v["apiVersion"] != "v1" || v["kind"] != "Pod" {
        return Err(format!("{what}: not a Pod (apiVersion v1, kind Pod)"));
    }
    Ok(Template {
        name: what.to_string(),
        doc: v,
    })
}

/// `path` as pitcrew compares mount and node paths: `//`, `.` components and a trailing `/`
/// taken out; a relative path, or one with a `..` component, is an error.
pub fn normal_path(path: &str) -> Result<String, String> {
    if !path.starts_with('/') {
        return Err(format!("{path:?} is not an absolute path"));
    }
    let mut normal = String::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(format!("{path:?} has a `..` component")),
            part => {
                normal.push('/');
                normal.push_str(part);
            }
        }
    }
    if normal.is_empty() {
        normal.push('/');
    }
    Ok(normal)
}

/// A mapping at `v[key]`, made when absent; an error naming its field `at` when it is
/// something else.
fn object<'v>(v: &'v mut Value, key: &str, at: &str) -> Result<&'v mut Map<String, Value>, String> {
    let obj = v
        .as_object_mut()
        .ok_or_else(|| format!("{at}: not inside a mapping"))?;
    let entry = obj.entry(key).or_insert_with(|| json!({}));
    if entry.is_null() {
        *entry = json!({});
    }
    entry
        .as_object_mut()
        .ok_or_else(|| format!("{at}: not a mapping"))
}

/// A list at `v[key]`, made when absent; an error naming its field `at` when it is something
/// else.
fn list<'v>(
    v: &'v mut Map<String, Value>,
    key: &str,
    at: &str,
) -> Result<&'v mut Vec<Value>, String> {
    let entry = v.entry(key).or_insert_with(|| json!([]));
    if entry.is_null() {
        *entry = json!([]);
    }
    entry
        .as_array_mut()
        .ok_or_else(|| format!("{at}: not a list"))
}

/// The Pod for `spec` from `template`: refuses a template that asks for what would undo the
/// sandbox ([`check`]: host namespaces, another container, a privileged or lasting init
/// container, a mount on or around pitcrew's paths or the image's system directories, nested
/// mounts, a loader variable in the sandbox container's environment, a node path not allowed,
/// an unconfined seccomp profile), then sets what pitcrew owns. An error names the template and the field.
pub fn pod(template: &Template, spec: &PodSpec) -> Result<Value, String> {
    check::check(&template.doc, spec.allow_host_paths)
        .and_then(|()| fill(&template.doc, spec))
        .map_err(|e| format!("pod template {}: {e}", template.name))
}

/// The checked template `doc` with what pitcrew owns set.
fn fill(doc: &Value, spec: &PodSpec) -> Result<Value, String> {
    let mut pod = doc.clone();
    let meta = object(&mut pod, "metadata", "metadata")?;
    meta.insert("name".into(), json!(spec.id));
    meta.remove("generateName");
    let labels = object(&mut pod["metadata"], "labels", "metadata.labels")?;
    labels.insert(LABEL_SANDBOX.into(), json!(spec.id));
    labels.insert(LABEL_ENGINE.into(), json!("kubernetes"));
    labels.insert(LABEL_VERSION.into(), json!(env!("CARGO_PKG_VERSION")));

    let s = object(&mut pod, "spec", "spec")?;
    s.insert("restartPolicy".into(), json!("Never"));
    s.insert("automountServiceAccountToken".into(), json!(false));
    s.insert("enableServiceLinks".into(), json!(false));
    for key in ["hostPID", "hostIPC", "hostNetwork", "shareProcessNamespace"] {
        s.insert(key.into(), json!(false));
    }
    // Volumes: the template's others (checked: never one of pitcrew's names), and pitcrew's.
    let volumes = list(s, "volumes", "spec.volumes")?;
    for (name, _, memory) in VOLUMES {
        let empty = if memory {
            json!({"medium": "Memory"})
        } else {
            json!({})
        };
        volumes.push(json!({"name": name, "emptyDir": empty}));
    }

    let containers = list(s, "containers", "spec.containers")?;
    if containers.is_empty() {
        containers.push(json!({"name": CONTAINER}));
    }
    let c = containers[0]
        .as_object_mut()
        .ok_or("spec.containers[0]: not a mapping")?;
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
    // The template's mounts (checked: none on, inside or above pitcrew's paths), and pitcrew's.
    let mounts = list(c, "volumeMounts", "spec.containers[0].volumeMounts")?;
    for (name, path, _) in VOLUMES {
        mounts.push(json!({"name": name, "mountPath": path}));
    }

    let at = "spec.containers[0].securityContext";
    let sc = c.entry("securityContext").or_insert_with(|| json!({}));
    if sc.is_null() {
        *sc = json!({});
    }
    let sc = sc.as_object_mut().ok_or(format!("{at}: not a mapping"))?;
    let profile = sc.get("seccompProfile").cloned().unwrap_or(Value::Null);
    let seccomp = match profile["type"].as_str() {
        None | Some("RuntimeDefault") => json!({"type": "RuntimeDefault"}),
        Some("Localhost") => profile,
        Some(other) => {
            return Err(format!(
                "{at}.seccompProfile.type: seccompProfile {other} is refused (RuntimeDefault or Localhost)"
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
        .ok_or("spec.containers[0].resources: not a mapping")?;
    for part in ["requests", "limits"] {
        let m = res.entry(part).or_insert_with(|| json!({}));
        let m = m
            .as_object_mut()
            .ok_or_else(|| format!("spec.containers[0].resources.{part}: not a mapping"))?;
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
