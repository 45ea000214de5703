//! What a Pod template may not ask for: anything that would run beside the `sandbox` container,
//! reach the node, mount something on, inside or above pitcrew's paths (directly, or through a
//! link planted in another mount), or run the template's own code as PID 1 (a loader variable,
//! a volume over the image's programs). Each refusal names the field
//! (`spec.initContainers[0].restartPolicy`, `spec.volumes[2].hostPath`) and why.

use super::{normal_path, CONTAINER, VOLUMES};
use pitcrew_core::env_policy;
use serde_json::Value;

/// Paths of the image that are links into pitcrew's mount paths (Debian's `/var/run` and
/// `/var/lock`, into `/run`): a mount there lands in pitcrew's volume.
const LINKS: [(&str, &str); 2] = [("/var/run", "/run"), ("/var/lock", "/run/lock")];

/// Directories of the sandbox image whose contents pitcrew-init (PID 1), the dynamic linker,
/// node or the agent run or read as code or configuration (`/usr/local/bin/pitcrew-init`,
/// node, `/etc/ld.so.preload`, the agent's tree in `/opt/pitcrew`, root's home), and the
/// kernel's `/proc`, `/sys` and `/dev`, which pitcrew-init reads and confines by: a template
/// volume on, inside or above one would replace them with the template's files.
const SYSTEM: [&str; 13] = [
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/usr",
    "/etc",
    "/opt/pitcrew",
    "/root",
    "/proc",
    "/sys",
    "/dev",
];

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
        mounts_ok(c, &at, true)?;
        env_ok(c, &at)?;
        no_exec_handlers(c, &at)?;
    }
    for (i, c) in items(spec, "initContainers", "spec")?.iter().enumerate() {
        let at = format!("spec.initContainers[{i}]");
        init_container_ok(c, &at)?;
        // Not the image's system directories: an init container's own image is the
        // template's code already, and it runs before the sandbox, writing only volumes.
        mounts_ok(c, &at, false)?;
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

/// Every `volumeMounts` entry of the container at `at`: never one of pitcrew's volumes, no
/// `subPathExpr`, and a mount path (normalised) neither on, inside nor above one of pitcrew's
/// mount paths or the image's links into them, nor on or inside another mount path of the
/// container. In the sandbox container (`sandbox`), nor on, inside or above one of the image's
/// [`SYSTEM`] directories either.
fn mounts_ok(c: &Value, at: &str, sandbox: bool) -> Result<(), String> {
    let mut seen: Vec<Mount> = Vec::new();
    for (j, m) in items(c, "volumeMounts", at)?.iter().enumerate() {
        let at = format!("{at}.volumeMounts[{j}]");
        if let Some((name, _, _)) = VOLUMES.iter().find(|(n, _, _)| m["name"] == *n) {
            return Err(format!("{at}.name: the volume {name} is pitcrew's"));
        }
        if !m["subPathExpr"].is_null() {
            return Err(format!(
                "{at}.subPathExpr: refused (it is expanded from the container's environment when the container starts, so what it names cannot be checked; write subPath)"
            ));
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
            if let Some(how) = relation(&normal, own) {
                return Err(format!(
                    "{at}.mountPath: {path:?} {how} pitcrew's {own}{note}"
                ));
            }
        }
        if sandbox {
            system_ok(path, &normal, &at)?;
        }
        let here = Mount {
            at,
            path: path.to_string(),
            normal,
        };
        for other in &seen {
            nested_ok(&here, other)?;
        }
        seen.push(here);
    }
    Ok(())
}

/// A `volumeMounts` entry: its field, its `mountPath` as written and normal.
struct Mount {
    at: String,
    path: String,
    normal: String,
}

/// Two mounts `a` and `b` of one container: neither on nor inside the other. The error names
/// the inner one's field and the outer one's.
fn nested_ok(a: &Mount, b: &Mount) -> Result<(), String> {
    let (inner, outer, how) = if a.normal == b.normal {
        (a, b, "is also")
    } else if within(&a.normal, &b.normal) {
        (a, b, "is inside")
    } else if within(&b.normal, &a.normal) {
        (b, a, "is inside")
    } else {
        return Ok(());
    };
    Err(format!(
        "{}.mountPath: {:?} {how} {:?}, the mountPath of {}: a mount on or inside another mount of the container is refused (the outer volume decides what the inner path resolves to: a link planted in it sends the inner mount elsewhere, onto pitcrew's paths)",
        inner.at, inner.path, outer.path, outer.at
    ))
}

/// The sandbox container's mount `path` (normal: `normal`) at `at`, neither on, inside nor
/// above one of the image's [`SYSTEM`] directories (`/dev/shm` excepted).
fn system_ok(path: &str, normal: &str, at: &str) -> Result<(), String> {
    // The runtime's shared-memory tmpfs: a larger one (an in-memory emptyDir) is the usual
    // Kubernetes idiom, and nothing runs or loads from it.
    if normal == "/dev/shm" {
        return Ok(());
    }
    for dir in SYSTEM {
        if let Some(how) = relation(normal, dir) {
            return Err(format!(
                "{at}.mountPath: {path:?} {how} the image's {dir}: a volume there would replace what pitcrew-init (PID 1), the dynamic linker or the agent run or read (the image's pitcrew-init, node and agent are in /usr/local/bin and /opt/pitcrew)"
            ));
        }
    }
    Ok(())
}

/// How the normal path `path` stands to the normal path `dir`: `is`, `is inside`, `holds`, or
/// none of them.
fn relation(path: &str, dir: &str) -> Option<&'static str> {
    if path == dir {
        Some("is")
    } else if within(path, dir) {
        Some("is inside")
    } else if within(dir, path) {
        Some("holds")
    } else {
        None
    }
}

/// The sandbox container's environment at `at`, which is pitcrew-init's (PID 1) and every
/// `kubectl exec … pitcrew-init attach`'s before the agent's environment is built from it: no
/// `env` entry (a `value` or a `valueFrom`) whose name the environment policy strips from
/// every layer (`LD_PRELOAD`, `GLIBC_TUNABLES`, …: they make the dynamic linker load code), and
/// no `envFrom`, whose names cannot be checked here.
fn env_ok(c: &Value, at: &str) -> Result<(), String> {
    if !items(c, "envFrom", at)?.is_empty() {
        return Err(format!(
            "{at}.envFrom: refused in the sandbox container (the names a ConfigMap or Secret brings cannot be checked here; write each variable in env)"
        ));
    }
    for (j, e) in items(c, "env", at)?.iter().enumerate() {
        let name = e["name"]
            .as_str()
            .ok_or_else(|| format!("{at}.env[{j}].name: missing or not a string"))?;
        if let Some(rule) = env_policy::loader_denial(name) {
            return Err(format!(
                "{at}.env[{j}].name: {name} is refused by the loader rule {rule}: it would reach pitcrew-init (PID 1) and every `kubectl exec` of it, not only the agent, which never gets it"
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
