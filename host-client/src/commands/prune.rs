//! `pitcrew prune [--dry-run] [--force]`: takes down the sandboxes nobody drives any more: those
//! whose run's host went away (`orphaned`) and those whose supervisor is gone (a local
//! sandbox `stopped` or `stale`, an exited container). Kept and in-run sandboxes are left
//! alone, and so is a local one whose pid cannot be shown to be the sandbox's (`unverified`).
//! Each is taken down as `down` would: one holding records the host never collected keeps its
//! state (and says so) unless `--force`. Every sandbox pruned is listed (with `--json` as an
//! array); `--dry-run` lists them and changes nothing.

use super::ps::list_sandboxes;
use crate::engine::{EngineArgs, SandboxEntry, SandboxId};
use crate::output::{errln, outln};
use crate::report::escape_controls;
use std::process::ExitCode;

/// Arguments of `pitcrew prune`.
#[derive(Debug, clap::Args)]
pub struct PruneArgs {
    /// Engine options (`--engine` prunes one engine's sandboxes).
    #[command(flatten)]
    pub engine: EngineArgs,
    /// List what would be pruned, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also delete the state of sandboxes holding records the host never collected.
    #[arg(long)]
    pub force: bool,
    /// Print one entry per sandbox as a JSON array (`sandbox`, `engine`, `state`, `why`,
    /// `outcome`: `would-prune`, `pruned`, `kept` or `failed`, and `warning` or `error`).
    #[arg(long)]
    pub json: bool,
}

/// Why `s` is pruned, when it is: nobody drives it any more. `stopped` and `stale` are the
/// listed states of a sandbox whose supervisor is gone (a container is `stopped` only once it
/// exited: a paused one, or one a run has created and not started yet, shows its own status).
pub fn prunable(s: &SandboxEntry) -> Option<&'static str> {
    match s.state.as_str() {
        "orphaned" => Some("its run's host went away"),
        _ if s.running => None,
        "stopped" | "stale" | "exited" => Some("its supervisor is gone"),
        _ => None,
    }
}

/// What became of one sandbox `prune` took (or, with `--dry-run`, would take) down.
#[derive(Debug, serde::Serialize)]
struct Pruned {
    sandbox: String,
    engine: String,
    state: String,
    why: &'static str,
    /// `would-prune`, `pruned` (stopped and removed), `kept` (stopped, its state kept) or
    /// `failed`.
    outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    warning: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl Pruned {
    /// The line `prune` prints for it (unescaped).
    fn line(&self) -> String {
        let what = format!(
            "{} ({}, {}: {})",
            self.sandbox, self.engine, self.state, self.why
        );
        let warning = self.warning.as_deref().unwrap_or_default();
        match (self.outcome, &self.warning) {
            ("would-prune", _) => format!("would prune {what}"),
            // Stopped, but what it holds keeps it: said as such, not as pruned.
            ("kept", _) => format!("stopped {what} but did not remove it: {warning}"),
            (_, Some(_)) => format!("pruned {what}: removed; {warning}"),
            _ => format!("pruned {what}: removed"),
        }
    }
}

/// Runs `pitcrew prune`: exit 0 when every pruned sandbox was taken down (or none was found),
/// 1 when one could not be.
pub fn run(args: &PruneArgs) -> anyhow::Result<ExitCode> {
    let (list, _) = list_sandboxes(&args.engine)?;
    let mut done = Vec::new();
    for s in &list {
        let Some(why) = prunable(s) else { continue };
        let id = SandboxId(s.id.clone());
        let mut entry = Pruned {
            sandbox: s.id.clone(),
            engine: s.engine.clone(),
            state: s.state.clone(),
            why,
            outcome: "would-prune",
            warning: None,
            error: None,
        };
        if !args.dry_run {
            let taken = args.engine.engine_for(&id).and_then(|engine| {
                crate::engine::stop_keeping_records(&*engine, &id, false, args.force)
            });
            match taken {
                Ok(outcome) => {
                    entry.outcome = if outcome.state_kept { "kept" } else { "pruned" };
                    entry.warning = outcome.warning;
                }
                Err(err) => {
                    entry.outcome = "failed";
                    entry.error = Some(format!("{err:#}"));
                    errln!(
                        "pitcrew: prune {}: {}",
                        escape_controls(&s.id),
                        escape_controls(&format!("{err:#}"))
                    );
                }
            }
        }
        // Said on stdout as each is done; a closed stdout does not stop the pruning (pitcrew
        // exits 141 at its end).
        if !args.json && entry.outcome != "failed" {
            let _ = outln!("{}", escape_controls(&entry.line()));
        }
        done.push(entry);
    }
    if args.json {
        let _ = outln!("{}", serde_json::to_string_pretty(&done)?);
    } else if done.is_empty() {
        outln!("nothing to prune")?;
    }
    Ok(if done.iter().any(|e| e.outcome == "failed") {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(state: &str, running: bool) -> SandboxEntry {
        SandboxEntry {
            id: "pc-1".into(),
            engine: "local".into(),
            running,
            state: state.into(),
            detail: serde_json::Value::Null,
        }
    }

    /// A stopped container's entry as the container engines list it.
    fn container(status: &str) -> SandboxEntry {
        let exited = matches!(status, "exited" | "stopped" | "dead");
        SandboxEntry {
            engine: "podman".into(),
            detail: serde_json::json!({"state": status}),
            ..entry(if exited { "stopped" } else { status }, false)
        }
    }

    #[test]
    fn only_sandboxes_nobody_drives_are_pruned() {
        assert!(prunable(&entry("orphaned", true)).is_some());
        assert!(prunable(&entry("stopped", false)).is_some());
        assert!(prunable(&entry("stale", false)).is_some());
        assert!(prunable(&entry("exited", false)).is_some());
        assert!(prunable(&entry("kept", true)).is_none());
        assert!(prunable(&entry("in-run", true)).is_none());
        assert!(prunable(&entry("unverified", false)).is_none());
        assert!(prunable(&container("exited")).is_some());
        assert!(prunable(&container("paused")).is_none());
        assert!(prunable(&container("created")).is_none());
    }
}
