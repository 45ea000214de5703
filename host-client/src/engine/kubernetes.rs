//! The `kubernetes` engine: a Pod per sandbox, through `kubectl`, so it works with whatever
//! cluster and credentials the user's kubeconfig names (`--context`, `--namespace`).
//!
//! `start` creates the Pod from the template ([`pod`]), waits until its container runs and
//! the supervisor answers, and names the Pod's condition when it does not start (an image that
//! cannot be pulled, a Pod that cannot be scheduled, a container that exits), deleting it then.
//! The transport is `kubectl exec -i POD -c sandbox -- pitcrew-init attach`. `stop` deletes the
//! Pod (its `emptyDir` volumes go with it). Sandboxes are found by the `pitcrew.sandbox` label;
//! their ids start with `pk-`, which is how the operator commands find the engine without
//! `--engine`.

pub mod pod;

use super::container::LABEL_SANDBOX;
use super::{Connection, Engine, SandboxEntry, SandboxId, SandboxSpec, StopOutcome};
use anyhow::{bail, Context as _};
use pitcrew_core::harness::SandboxLayout;
use serde_json::Value;
use std::ffi::OsString;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The prefix of this engine's sandbox ids.
pub const ID_PREFIX: &str = "pk-";
/// How long `start` waits for the Pod to run and its supervisor to answer (image pulls
/// included).
const START_TIMEOUT: Duration = Duration::from_secs(300);
/// Memory the supervisor and its `attach` connections may use beyond the agent's limit.
const SUPERVISOR_MEMORY: u64 = 256 << 20;
/// Every `kubectl` call that only reads gives up after this (an unreachable cluster).
const REQUEST_TIMEOUT: &str = "--request-timeout=30s";
/// Container waiting reasons that mean the Pod will not start by itself.
const FATAL_WAITING: [&str; 7] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "CrashLoopBackOff",
    "RunContainerError",
];

/// The kubernetes engine.
pub struct KubernetesEngine {
    context: Option<String>,
    namespace: Option<String>,
    image: Option<String>,
    template: Option<std::path::PathBuf>,
    allow_host_paths: Vec<String>,
}

impl KubernetesEngine {
    /// An engine for the kubeconfig's `context` (or its current one) and `namespace` (or the
    /// context's), creating Pods of `image` from `template` (or the built-in one), whose
    /// `hostPath` volumes may name the node paths `allow_host_paths` only (normal, as
    /// [`pod::normal_path`] gives them).
    pub fn new(
        context: Option<String>,
        namespace: Option<String>,
        image: Option<String>,
        template: Option<std::path::PathBuf>,
        allow_host_paths: Vec<String>,
    ) -> KubernetesEngine {
        KubernetesEngine {
            context,
            namespace,
            image,
            template,
            allow_host_paths,
        }
    }

    /// `kubectl [--context C] [--namespace N] args…`.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("kubectl");
        if let Some(c) = &self.context {
            cmd.args(["--context", c]);
        }
        if let Some(n) = &self.namespace {
            cmd.args(["--namespace", n]);
        }
        cmd.args(args).stdin(Stdio::null());
        cmd
    }

    /// Runs `kubectl args…`; its stdout, or an error with its stderr.
    fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self
            .command(args)
            .output()
            .context("kubectl: cannot run it (is it on PATH?)")?;
        if !out.status.success() {
            bail!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The Pod `name`, or `None` when the cluster has none.
    fn get(&self, name: &str) -> anyhow::Result<Option<Value>> {
        let out = self
            .command(&[
                "get",
                "pod",
                name,
                "-o",
                "json",
                "--ignore-not-found",
                REQUEST_TIMEOUT,
            ])
            .output()
            .context("kubectl: cannot run it (is it on PATH?)")?;
        if !out.status.success() {
            bail!(
                "kubectl get pod {name}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        if out.stdout.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        Ok(Some(
            serde_json::from_slice(&out.stdout).context("kubectl get pod: not JSON")?,
        ))
    }

    /// The Pod document for a new sandbox.
    fn pod_for(&self, id: &SandboxId, spec: &SandboxSpec) -> anyhow::Result<Value> {
        let image = self
            .image
            .as_deref()
            .context("--engine kubernetes needs --image (the production image, e.g. from scripts/build-image pushed to your registry)")?;
        let template = match &self.template {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("--pod-template {}", path.display()))?;
                pod::parse_template(&text, &path.display().to_string())
            }
            None => pod::parse_template(pod::DEFAULT_TEMPLATE, "images/kubernetes/pod.yaml"),
        }
        .map_err(anyhow::Error::msg)?;
        pod::pod(
            &template,
            &pod::PodSpec {
                id: &id.0,
                image,
                memory_bytes: spec.memory_bytes.saturating_add(SUPERVISOR_MEMORY),
                serve_args: spec.serve_args(),
                allow_host_paths: &self.allow_host_paths,
            },
        )
        .map_err(anyhow::Error::msg)
    }

    /// Waits until the Pod's container runs and its supervisor answers; the Pod's condition
    /// when it will not.
    fn wait_ready(&self, id: &SandboxId) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let pod = self
                .get(&id.0)?
                .with_context(|| format!("pod {id} is gone"))?;
            if let Some(why) = not_starting(&pod) {
                bail!("pod {id} did not start: {why}");
            }
            let running = pod["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["name"] == pod::CONTAINER && c["state"]["running"].is_object());
            if running {
                // The container runs; the supervisor answers once it has its socket.
                match self.connect(id) {
                    Ok(conn) => {
                        conn.close();
                        return Ok(());
                    }
                    Err(e) if Instant::now() >= deadline => {
                        return Err(e.context(format!(
                            "pod {id} runs, but its supervisor does not answer"
                        )));
                    }
                    Err(_) => {}
                }
            }
            if Instant::now() >= deadline {
                bail!(
                    "pod {id} not ready after {} s: {}",
                    START_TIMEOUT.as_secs(),
                    summary(&pod)
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn delete(&self, id: &SandboxId) -> anyhow::Result<()> {
        self.kubectl(&[
            "delete",
            "pod",
            &id.0,
            "--ignore-not-found",
            "--grace-period=15",
            "--wait=true",
        ])?;
        Ok(())
    }
}

/// Why the Pod will not start by itself, if that is what it says: unschedulable, an image it
/// cannot pull, a container that cannot be created or that exited, a failed Pod.
pub fn not_starting(pod: &Value) -> Option<String> {
    let status = &pod["status"];
    for c in status["containerStatuses"].as_array().into_iter().flatten() {
        let name = c["name"].as_str().unwrap_or("?");
        let waiting = &c["state"]["waiting"];
        if let Some(reason) = waiting["reason"].as_str() {
            if FATAL_WAITING.contains(&reason) {
                let msg = waiting["message"].as_str().unwrap_or("");
                return Some(one_line(&format!("container {name}: {reason}: {msg}")));
            }
        }
        let done = &c["state"]["terminated"];
        if done.is_object() {
            return Some(one_line(&format!(
                "container {name} exited {} ({}){}",
                done["exitCode"],
                done["reason"].as_str().unwrap_or("terminated"),
                done["message"]
                    .as_str()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            )));
        }
    }
    for cond in status["conditions"].as_array().into_iter().flatten() {
        if cond["type"] == "PodScheduled" && cond["status"] == "False" {
            return Some(one_line(&format!(
                "{}: {}",
                cond["reason"].as_str().unwrap_or("not scheduled"),
                cond["message"].as_str().unwrap_or("")
            )));
        }
    }
    match status["phase"].as_str() {
        Some(phase @ ("Failed" | "Succeeded")) => Some(one_line(&format!(
            "phase {phase}{}",
            status["message"]
                .as_str()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ))),
        _ => None,
    }
}

/// Phase and conditions, for a timeout.
fn summary(pod: &Value) -> String {
    let conditions: Vec<String> = pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{}={}",
                c["type"].as_str().unwrap_or("?"),
                c["status"].as_str().unwrap_or("?")
            )
        })
        .collect();
    format!(
        "phase {}, conditions {}",
        pod["status"]["phase"].as_str().unwrap_or("unknown"),
        if conditions.is_empty() {
            "none".into()
        } else {
            conditions.join(", ")
        }
    )
}

/// `text` on one line, cut to 300 characters.
fn one_line(text: &str) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let flat = flat.trim_end_matches([' ', ':']).to_string();
    flat.chars().take(300).collect()
}

impl Engine for KubernetesEngine {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    fn start(&self, spec: &SandboxSpec) -> anyhow::Result<SandboxId> {
        if let Some(id) = &spec.existing {
            let id = SandboxId(id.clone());
            self.get(&id.0)?.with_context(|| format!("no pod {id}"))?;
            return Ok(id);
        }
        if let Some(name) = spec.pass_env.first() {
            bail!("--pass-env {name}: not for the kubernetes engine (set the variable in the Pod template's container env)");
        }
        let random = super::random_id()?;
        let id = SandboxId(format!(
            "{ID_PREFIX}{}",
            random
                .trim_start_matches(|c| c != '-')
                .trim_start_matches('-')
        ));
        let doc = self.pod_for(&id, spec)?;
        let mut child = self
            .command(&["create", "-f", "-", "-o", "name"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("kubectl: cannot run it (is it on PATH?)")?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(&serde_json::to_vec(&doc)?)?;
        }
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "kubectl create pod {id}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        if let Err(e) = self.wait_ready(&id) {
            // A Pod that did not start is not left behind.
            if let Err(del) = self.delete(&id) {
                tracing::warn!("deleting pod {id}: {del:#}");
            }
            return Err(e);
        }
        Ok(id)
    }

    fn connect(&self, id: &SandboxId) -> anyhow::Result<Connection> {
        let mut argv: Vec<OsString> = vec!["kubectl".into()];
        if let Some(c) = &self.context {
            argv.extend(["--context".into(), c.into()]);
        }
        if let Some(n) = &self.namespace {
            argv.extend(["--namespace".into(), n.into()]);
        }
        for a in [
            "exec",
            "-i",
            &id.0,
            "-c",
            pod::CONTAINER,
            "--",
            "pitcrew-init",
            "attach",
        ] {
            argv.push(a.into());
        }
        Connection::spawn(&argv, &format!("pod {id} (kubectl exec)"))
    }

    fn owns(&self, id: &SandboxId) -> anyhow::Result<bool> {
        Ok(self
            .get(&id.0)?
            .is_some_and(|p| p["metadata"]["labels"][LABEL_SANDBOX] == id.0.as_str()))
    }

    fn stop(&self, id: &SandboxId, _keep_state: bool) -> anyhow::Result<StopOutcome> {
        self.delete(id)
            .with_context(|| format!("deleting pod {id}"))?;
        Ok(StopOutcome::default())
    }

    fn layout(&self, _id: &SandboxId) -> anyhow::Result<SandboxLayout> {
        Ok(SandboxLayout {
            root: super::container::ROOT.to_string(),
        })
    }

    fn describe(&self, id: &SandboxId) -> anyhow::Result<Value> {
        let pod = self.get(&id.0)?.with_context(|| format!("no pod {id}"))?;
        Ok(describe(&pod))
    }

    fn log_source(&self, id: &SandboxId, follow: bool) -> anyhow::Result<super::LogSource> {
        // PID 1's output is the Pod's sandbox container's.
        let mut args = vec!["logs"];
        if follow {
            args.push("--follow");
        }
        args.extend([id.0.as_str(), "--container", pod::CONTAINER]);
        Ok(super::LogSource::Command(self.command(&args)))
    }

    fn list(&self) -> anyhow::Result<Vec<SandboxEntry>> {
        let text = self.kubectl(&[
            "get",
            "pods",
            "-l",
            LABEL_SANDBOX,
            "-o",
            "json",
            REQUEST_TIMEOUT,
        ])?;
        let list: Value = serde_json::from_str(&text).context("kubectl get pods: not JSON")?;
        Ok(list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["metadata"]["labels"][LABEL_SANDBOX] == p["metadata"]["name"])
            .map(|p| SandboxEntry {
                id: p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                engine: "kubernetes".into(),
                running: p["status"]["phase"] == "Running",
                state: p["status"]["phase"]
                    .as_str()
                    .unwrap_or("unknown")
                    .to_lowercase(),
                detail: describe(p),
            })
            .collect())
    }
}

/// What `inspect` and `ps` show of a Pod.
fn describe(pod: &Value) -> Value {
    let container = pod["spec"]["containers"]
        .as_array()
        .and_then(|c| c.first())
        .cloned()
        .unwrap_or(Value::Null);
    serde_json::json!({
        "engine": "kubernetes",
        "pod": pod["metadata"]["name"],
        "namespace": pod["metadata"]["namespace"],
        "node": pod["spec"]["nodeName"],
        "phase": pod["status"]["phase"],
        "image": container["image"],
        "created": pod["metadata"]["creationTimestamp"],
        "runtime_class": pod["spec"]["runtimeClassName"],
        "memory_limit": container["resources"]["limits"]["memory"],
        "labels": pod["metadata"]["labels"],
    })
}

#[cfg(test)]
mod tests;
