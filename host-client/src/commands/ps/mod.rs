//! `pitcrew ps [--filter KEY=VALUE]… [--format FORMAT] [--json]`: the sandboxes this host knows
//! about: the local engine's state directory, and the podman and docker containers labelled
//! `pitcrew.sandbox` (each engine whose CLI is installed; `--engine` lists one). A running
//! sandbox is asked which run holds it: `in-run`, `orphaned` (its run's host went away) or
//! `kept`. The table has a header and the columns ID, ENGINE, STATE, ITERATION, CREATED (how
//! long ago), IMAGE, HARNESS (the run's, while one holds the sandbox) and NOTE; `-q` prints
//! the ids alone, `--json` everything, `--format` a template ([`view`]).

use crate::engine::{status_of, Engine, EngineArgs, SandboxEntry, SandboxId};
use crate::output::{out, outln};
use crate::report::escape_controls;
use pitcrew_core::protocol::status::ClaimState;
use std::process::ExitCode;
use view::{Filters, Template};

mod view;

/// Arguments of `pitcrew ps`.
#[derive(Debug, clap::Args)]
pub struct PsArgs {
    /// Engine options.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Print the list as JSON (as `--format json`): each sandbox with `image` and
    /// `created_at` (RFC 3339, UTC) besides the engine's detail.
    #[arg(long)]
    pub json: bool,
    /// Only the sandboxes matching KEY=VALUE (repeatable; one key given twice matches either
    /// value, different keys must all match): id (prefix), engine, state or status (`running`
    /// matches every running sandbox), image, harness, run (substrings).
    #[arg(long, value_name = "KEY=VALUE")]
    pub filter: Vec<String>,
    /// `table` (the default), `json`, or a template of `{{.Field}}` placeholders (fields: ID,
    /// Engine, State, Running, Iteration, Created, CreatedAt, Image, Harness, Run, Note; `\t`
    /// is a tab; a leading `table ` adds a header and aligns the columns).
    #[arg(long, value_name = "FORMAT", conflicts_with = "json")]
    pub format: Option<String>,
}

/// Refines a running sandbox's state from its supervisor's claim: `in-run` while a connected
/// host drives a run, `orphaned` when that host went away mid-run (`pitcrew run --resume`
/// finishes it), `kept` when no run holds it.
fn show_claim(engine: &dyn Engine, s: &mut SandboxEntry) {
    let Ok(status) = status_of(engine, &SandboxId(s.id.clone())) else {
        return;
    };
    let claim = status.claim.as_ref();
    s.state = match claim {
        Some(claim) if claim.state == ClaimState::Orphaned => {
            s.detail["state_detail"] = format!(
                "run {} lost its host after {} iteration(s) ({}); pitcrew run --resume {}",
                claim.run,
                claim.iterations.len(),
                claim
                    .orphaned_because
                    .as_deref()
                    .unwrap_or("its host went away"),
                s.id
            )
            .into();
            "orphaned"
        }
        Some(claim) => {
            s.detail["state_detail"] = format!("run {}", claim.run).into();
            "in-run"
        }
        None => "kept",
    }
    .to_string();
    s.detail["claim"] = serde_json::to_value(claim).unwrap_or_default();
    s.detail["iteration"] = status.iteration.into();
}

/// The sandboxes of every engine installed here (or the one `engine.engine` names), a running
/// one's state refined by its claim ([`show_claim`]); and the names of the engines asked.
pub fn list_sandboxes(
    engine: &EngineArgs,
) -> anyhow::Result<(Vec<SandboxEntry>, Vec<&'static str>)> {
    let explicit = engine.named()?.is_some();
    let mut list = Vec::new();
    let mut names = Vec::new();
    for engine in engine.engines_to_list()? {
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
    Ok((list, names))
}

/// Prints the ids of the sandboxes the engines know, one a line, without asking any sandbox
/// (the hidden `pitcrew __complete-sandboxes` the completion scripts call); an engine that does
/// not answer is skipped quietly.
pub fn complete_ids(engine: &EngineArgs) -> anyhow::Result<ExitCode> {
    let mut ids: Vec<String> = engine
        .engines_to_list()?
        .iter()
        .filter_map(|e| e.list().ok())
        .flatten()
        .map(|s| s.id)
        .collect();
    ids.sort();
    ids.dedup();
    for id in ids {
        // Ids with a control character or a space are no word a shell could complete.
        if !id.chars().any(|c| c.is_control() || c.is_whitespace()) {
            outln!("{id}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `pitcrew ps`; `quiet` (the global `-q`) prints the ids alone, unless `--json` or
/// `--format` says otherwise.
pub fn run(args: &PsArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    // Bad options are refused before any engine is asked.
    let filters = Filters::parse(&args.filter)?;
    let format = args.format.as_deref().map(str::trim);
    let json = args.json || format == Some("json");
    let template = match format {
        None | Some("json") => None,
        Some(f) => Some(Template::parse(f)?),
    };
    let (mut list, names) = list_sandboxes(&args.engine)?;
    list.retain(|s| filters.matches(s));
    if json {
        let docs: Vec<_> = list.iter().map(view::json).collect();
        outln!("{}", serde_json::to_string_pretty(&docs)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(template) = template {
        out!("{}", template.render(&list, view::now()))?;
        return Ok(ExitCode::SUCCESS);
    }
    if quiet {
        for s in &list {
            outln!("{}", escape_controls(&s.id))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        let filtered = if args.filter.is_empty() {
            ""
        } else {
            " match the filters"
        };
        outln!("no sandboxes{filtered} ({})", names.join(", "))?;
        return Ok(ExitCode::SUCCESS);
    }
    out!(
        "{}",
        Template::parse(view::DEFAULT_TABLE)?.render(&list, view::now())
    )?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests;
