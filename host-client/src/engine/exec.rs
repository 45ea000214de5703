//! The `exec` engine: an existing sandbox reached through an exec-style command.
//!
//! `--exec-template 'podman exec -i {sandbox} pitcrew-init attach'` is split on whitespace into
//! an argv (no shell) with `{sandbox}` replaced by the sandbox name; the spawned command's
//! stdin/stdout carry the protocol. Starting and stopping the sandbox belong to whoever created
//! it: `start` only checks that its supervisor answers, `run` leaves it running, and `down`
//! refuses unless `--force`, which asks the supervisor to shut down (PID 1 exits, so the
//! container stops; removing it stays with its owner).

use super::{Connection, Engine, SandboxEntry, SandboxId, SandboxSpec, StopOutcome};
use anyhow::{bail, Context as _};
use pitcrew_core::harness::SandboxLayout;
use std::ffi::OsString;

/// The exec engine.
pub struct ExecEngine {
    template: Vec<String>,
    root: String,
}

impl ExecEngine {
    /// An exec engine from a command template and the uploads root inside the sandbox.
    pub fn new(template: &str, root: &str) -> anyhow::Result<ExecEngine> {
        let template: Vec<String> = template.split_whitespace().map(str::to_string).collect();
        if template.is_empty() {
            bail!("--exec-template is empty");
        }
        if !template.iter().any(|a| a.contains("{sandbox}")) {
            bail!(
                "--exec-template {:?} does not name {{sandbox}}",
                template.join(" ")
            );
        }
        if !root.starts_with('/') {
            bail!("--sandbox-root {root:?} must be an absolute path inside the sandbox");
        }
        Ok(ExecEngine {
            template,
            root: root.trim_end_matches('/').to_string(),
        })
    }

    /// The transport argv for `sandbox`.
    pub fn argv(&self, sandbox: &str) -> Vec<OsString> {
        self.template
            .iter()
            .map(|a| a.replace("{sandbox}", sandbox).into())
            .collect()
    }
}

impl Engine for ExecEngine {
    fn name(&self) -> &'static str {
        "exec"
    }

    fn start(&self, spec: &SandboxSpec) -> anyhow::Result<SandboxId> {
        if let Some(name) = spec.pass_env.first() {
            anyhow::bail!(
                "--pass-env {name}: only for the local engine; an exec sandbox's environment is its container's (set it there)"
            );
        }
        let name = spec
            .existing
            .clone()
            .context("--engine exec attaches to an existing sandbox: pass --sandbox NAME")?;
        let id = SandboxId(name);
        self.connect(&id)?.close();
        Ok(id)
    }

    fn connect(&self, id: &SandboxId) -> anyhow::Result<Connection> {
        let argv = self.argv(&id.0);
        let shown: Vec<String> = argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        Connection::spawn(&argv, &format!("sandbox {id} ({})", shown.join(" ")))
    }

    fn owns(&self, _id: &SandboxId) -> anyhow::Result<bool> {
        Ok(false)
    }

    fn stop(&self, id: &SandboxId, _keep_state: bool) -> anyhow::Result<StopOutcome> {
        let mut conn = self.connect(id)?;
        let res = conn.client().shutdown();
        if let Err(err) = res {
            return Err(conn.explain(err)).context(format!("stopping sandbox {id}"));
        }
        conn.close();
        Ok(StopOutcome {
            warning: Some(format!(
                "its supervisor was asked to shut down; removing the container is left to whoever created {id}"
            )),
            ..StopOutcome::default()
        })
    }

    fn layout(&self, _id: &SandboxId) -> anyhow::Result<SandboxLayout> {
        Ok(SandboxLayout {
            root: self.root.clone(),
        })
    }

    fn describe(&self, id: &SandboxId) -> anyhow::Result<serde_json::Value> {
        let argv: Vec<String> = self
            .argv(&id.0)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        Ok(serde_json::json!({"engine": "exec", "id": id.0, "transport": argv, "root": self.root}))
    }

    fn list(&self) -> anyhow::Result<Vec<SandboxEntry>> {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_is_split_without_a_shell_and_substituted() {
        let e =
            ExecEngine::new("kubectl exec -i {sandbox} -- pitcrew-init attach", "/pc/").unwrap();
        assert_eq!(
            e.argv("pod-1; rm -rf /"),
            [
                "kubectl",
                "exec",
                "-i",
                "pod-1; rm -rf /",
                "--",
                "pitcrew-init",
                "attach"
            ]
            .map(OsString::from)
        );
        assert_eq!(e.layout(&SandboxId("x".into())).unwrap().root, "/pc");
        assert!(ExecEngine::new("podman exec -i box attach", "/p").is_err());
        assert!(ExecEngine::new("podman exec -i {sandbox}", "rel").is_err());
    }
}
