//! `pitcrew ps [--json]`: the sandboxes this host knows about: the local engine's state
//! directory, and the podman and docker containers labelled `pitcrew.sandbox` (each engine
//! whose CLI is installed; `--engine` lists one).

use crate::engine::EngineArgs;
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

/// Runs `pitcrew ps`.
pub fn run(args: &PsArgs) -> anyhow::Result<ExitCode> {
    let explicit = args.engine.engine.is_some();
    let mut list = Vec::new();
    let mut names = Vec::new();
    for engine in args.engine.engines_to_list()? {
        names.push(engine.name());
        match engine.list() {
            Ok(found) => list.extend(found),
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
