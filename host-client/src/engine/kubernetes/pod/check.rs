//! What a Pod template may not ask for: anything that would run beside the `sandbox` container,
//! reach the node, or mount something on, inside or above pitcrew's paths. Each refusal names
//! the field (`spec.initContainers[0].restartPolicy`, `spec.volumes[2].hostPath`) and why.

use super::{normal_path, CONTAINER, VOLUMES};
use serde_json::Value;

/// Paths of the image that are links into pitcrew's mount paths (Debian's `/var/run` and
/// `/var/lock`, into `/run`): a mount there lands in pitcrew's volume.
const LINKS: [(&str, &str); 2] = [("/var/run", "/run"), ("/var/lock", "/run/lock")];

/// Pod fields that would share the node's namespaces, or the Pod's, with the agent.
const HOST_NAMESPACES: [(&str, &str); 4] = [
    ("hostPID", "would show the node's processes to the agent"),
    ("hostIPC", "would share the node's IPC with the agent"),
    ("hostNetwork", "would put the agent on the node's network"),
    ("shareProcessNamespace", "would make pitcrew-init not PID 1"),
];

/// Refuses what in the template `pod` would undo the sandbox; `allow_host_paths` are the node
/// paths (normal, as [`normal_path`] gives them) a `hostPath` volume may name. The error is
/// `FIELD: why`.
pub(super) fn check(pod: &Value, allow_host_paths: &[String]) -> Result<(), String> {
    let spec = &pod["spec"];
    for (key, why) in HOST_NAMESPACES {
        if spec[key] == true {
            return Err(format!("spec.{key}: true {why}"));
        }
    }
    if !items(spec, "ephemeralContainers", "spec")?.is_empty() {
        return Err(
            "spec.ephemeralContainers: a container added beside the sandbox, \
                    sharing its Pod, is refused"
                .into(),
        );
    }
    for (i, volume) in items(spec, "volumes", "spec")?.iter().enumerate() {
        volume_ok(volume, &format!("spec.volumes[{i}]"), allow_host_paths)?;
    }
    let containers = items(spec, "containers", "spec")?;
    if containers.len() > 1 || containers.iter().any(|c| c["name"] != CONTAINER) {
        return Err(format!(
            "spec.containers: exactly one container, named {CONTAINER:?} (another container would share the Pod's network and volumes with the agent unseen)"
        ));
    }
    for (i, c) in containers.iter().enumerate() {
        let at = format!("spec.containers[{i}]");
        mounts_ok(c, &at)?;
        no_exec_handlers(c, &at)?;
    }
    for (i, c) in items(spec, "initContainers", "spec")?.iter().enumerate() {
        let at = format!("spec.initContainers[{i}]");
        init_container_ok(c, &at)?;
        mounts_ok(c, &at)?;
    }
    Ok(())
}

/// The list `v[key]` (absent or null: empty); an error naming `at.key` when it is not a list.
fn items<'v>(v: &'v Value, key: &str, at: &str) -> Result<&'v [Value], String> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(list)) => Ok(list),
        Some(_) => Err(format!("{at}.{key}: not a list")),
    }
}

/// A template volume: never one of pitcrew's names, and a `hostPath` only where the operator
/// allowed that node path.
fn volume_ok(volume: &Value, at: &str, allow_host_paths: &[String]) -> Result<(), String> {
    if let Some((name, _, _)) = VOLUMES.iter().find(|(n, _, _)| volume["name"] == *n) {
        return Err(format!("{at}.name: the volume {name} is pitcrew's"));
    }
    let host = &volume["hostPath"];
    if host.is_null() {
        return Ok(());
    }
    let path = host["path"]
        .as_str()
        .ok_or_else(|| format!("{at}.hostPath.path: missing or not a string"))?;
    let normal = normal_path(path).map_err(|e| format!("{at}.hostPath.path: {e}"))?;
    if allow_host_paths.contains(&normal) {
        return Ok(());
    }
    Err(format!(
        "{at}.hostPath: the node's {path:?} in the sandbox's Pod is refused unless the command line allows it (--allow-host-path {normal})"
    ))
}

/// Every `volumeMounts` entry of the container at `at`: never one of pitcrew's volumes, and a
/// mount path (normalised) neither on, inside nor above one of pitcrew's mount paths or the
/// image's links into them.
fn mounts_ok(c: &Value, at: &str) -> Result<(), String> {
    for (j, m) in items(c, "volumeMounts", at)?.iter().enumerate() {
        let at = format!("{at}.volumeMounts[{j}]");
        if let Some((name, _, _)) = VOLUMES.iter().find(|(n, _, _)| m["name"] == *n) {
            return Err(format!("{at}.name: the volume {name} is pitcrew's"));
        }
        let path = m["mountPath"]
            .as_str()
            .ok_or_else(|| format!("{at}.mountPath: missing or not a string"))?;
        let normal = normal_path(path).map_err(|e| format!("{at}.mountPath: {e}"))?;
        let owned = VOLUMES
            .iter()
            .map(|(_, own, _)| (*own, String::new()))
            .chain(
                LINKS
                    .iter()
                    .map(|(link, to)| (*link, format!(" (a link to {to} in the image)"))),
            );
        for (own, note) in owned {
            let how = if normal == own {
                "is"
            } else if within(&normal, own) {
                "is inside"
            } else if within(own, &normal) {
                "holds"
            } else {
                continue;
            };
            return Err(format!(
                "{at}.mountPath: {path:?} {how} pitcrew's {own}{note}"
            ));
        }
    }
    Ok(())
}

/// Whether the normal path `inner` is strictly below the normal path `outer`.
fn within(inner: &str, outer: &str) -> bool {
    inner != outer
        && (outer == "/"
            || inner
                .strip_prefix(outer)
                .is_some_and(|rest| rest.starts_with('/')))
}

/// An init container at `at`: runs to its end before the sandbox starts (no `restartPolicy`:
/// `Always` makes a native sidecar, which runs beside the agent), with no more privilege than
/// the runtime's default (not privileged, no explicit privilege escalation, no added
/// capability: any of them reaches the node, and from there the sandbox).
fn init_container_ok(c: &Value, at: &str) -> Result<(), String> {
    if !c.is_object() {
        return Err(format!("{at}: not a mapping"));
    }
    if let Some(policy) = c.get("restartPolicy").filter(|p| !p.is_null()) {
        return Err(format!(
            "{at}.restartPolicy: {policy} is refused (Always makes a native sidecar, which runs beside the agent for the Pod's life)"
        ));
    }
    let sc = &c["securityContext"];
    if sc["privileged"] == true {
        return Err(format!(
            "{at}.securityContext.privileged: true would give the init container the node's devices and every capability"
        ));
    }
    if sc["allowPrivilegeEscalation"] == true {
        return Err(format!(
            "{at}.securityContext.allowPrivilegeEscalation: true is refused (an init container runs with no more privilege than the runtime's default)"
        ));
    }
    let add = &sc["capabilities"]["add"];
    if !(add.is_null() || add.as_array().is_some_and(Vec::is_empty)) {
        return Err(format!(
            "{at}.securityContext.capabilities.add: {add} is refused (an init container runs with no more capabilities than the runtime's default)"
        ));
    }
    Ok(())
}

/// The sandbox container at `at` runs nothing but pitcrew-init: no lifecycle hook or probe that
/// executes a command in it (the kubelet would run it as the container's root, beside PID 1).
fn no_exec_handlers(c: &Value, at: &str) -> Result<(), String> {
    let handlers = [
        ("lifecycle", Some("postStart")),
        ("lifecycle", Some("preStop")),
        ("livenessProbe", None),
        ("readinessProbe", None),
        ("startupProbe", None),
    ];
    for (key, hook) in handlers {
        let (handler, field) = match hook {
            Some(hook) => (&c[key][hook], format!("{at}.{key}.{hook}.exec")),
            None => (&c[key], format!("{at}.{key}.exec")),
        };
        if !handler["exec"].is_null() {
            return Err(format!(
                "{field}: a command the kubelet would run in the sandbox container as root, beside pitcrew-init, is refused (httpGet, tcpSocket or grpc are not)"
            ));
        }
    }
    Ok(())
}
