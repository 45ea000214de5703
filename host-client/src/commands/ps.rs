//! `pitcrew ps [--json]`: the sandboxes this host's state directory knows about.

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
    let engine = args.engine.engine()?;
    let list = engine.list()?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        println!("no {} sandboxes", engine.name());
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
