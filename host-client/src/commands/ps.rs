//! `pitcrew ps [--json]`: the sandboxes this host knows about: the local engine's state
//! directory, and the podman and docker containers labelled `pitcrew.sandbox` (each engine
//! whose CLI is installed; `--engine` lists one). A running sandbox is asked which run holds
//! it: `in-run`, `orphaned` (its run's host went away) or `kept`.

use crate::engine::{status_of, Engine, EngineArgs, SandboxEntry, SandboxId};
use crate::report::escape_controls;
use std::process::ExitCode;

/// Arguments of `pitcrew ps`.
#[derive(Debug, clap::Args)]
pub struct PsArgs {
    /// Engine options.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Print the list as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Refines a running sandbox's state from its supervisor's claim: `in-run` while a connected
/// host drives a run, `orphaned` when that host went away mid-run (`pitcrew run --resume`
/// finishes it), `kept` when no run holds it.
fn show_claim(engine: &dyn Engine, s: &mut SandboxEntry) {
    let Ok(status) = status_of(engine, &SandboxId(s.id.clone())) else {
        return;
    };
    let claim = &status["claim"];
    s.state = match claim["state"].as_str() {
        Some("orphaned") => {
            s.detail["state_detail"] = format!(
                "run {} lost its host after {} iteration(s) ({}); pitcrew run --resume {}",
                claim["run"].as_str().unwrap_or_default(),
                claim["iterations"].as_array().map_or(0, Vec::len),
                claim["orphaned_because"]
                    .as_str()
                    .unwrap_or("its host went away"),
                s.id
            )
            .into();
            "orphaned"
        }
        Some(_) => {
            s.detail["state_detail"] =
                format!("run {}", claim["run"].as_str().unwrap_or_default()).into();
            "in-run"
        }
        None => "kept",
    }
    .to_string();
    s.detail["claim"] = claim.clone();
}

/// Runs `pitcrew ps`.
pub fn run(args: &PsArgs) -> anyhow::Result<ExitCode> {
    let explicit = args.engine.engine.is_some();
    let mut list = Vec::new();
    let mut names = Vec::new();
    for engine in args.engine.engines_to_list()? {
        names.push(engine.name());
        match engine.list() {
            Ok(found) => list.extend(found.into_iter().map(|mut s| {
                if s.running {
                    show_claim(&*engine, &mut s);
                }
                s
            })),
            // An engine named with --engine must answer; an installed one that does not is
            // reported and skipped (quietly when it is only a docker client without a daemon).
            Err(err) if !explicit => {
                let text = format!("{}: not listed: {err:#}", engine.name());
                let text = escape_controls(&text);
                if text.contains("Cannot connect to the Docker daemon") {
                    tracing::info!("{text}");
                } else {
                    tracing::warn!("{text}");
                }
            }
            Err(err) => return Err(err),
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        println!("no sandboxes ({})", names.join(", "));
    }
    for s in list {
        let mut line = format!(
            "{}  {}  {}  {}",
            s.id,
            s.engine,
            s.state,
            s.detail["root"].as_str().unwrap_or_default()
        );
        if let Some(why) = s.detail["state_detail"].as_str() {
            line += &format!("  ({why})");
        }
        println!("{}", escape_controls(&line));
    }
    Ok(ExitCode::SUCCESS)
}
