//! `pitcrew ps [--json]`: the sandboxes this host knows about: the local engine's state
//! directory, and the podman and docker containers labelled `pitcrew.sandbox` (each engine
//! whose CLI is installed; `--engine` lists one). A running sandbox is asked which run holds
//! it: `in-run`, `orphaned` (its run's host went away) or `kept`. The table has a header and
//! the columns ID, ENGINE, STATE, ITERATION, CREATED, HARNESS (the run's, while one holds the
//! sandbox) and NOTE; `-q` prints the ids alone, `--json` everything.

use crate::engine::{status_of, Engine, EngineArgs, SandboxEntry, SandboxId};
use crate::output::{out, outln};
use crate::report::escape_controls;
use pitcrew_core::protocol::status::{ClaimState, ClaimStatus};
use serde::Deserialize as _;
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

/// The claim and iteration [`show_claim`] put in `s`'s detail, read back as the status's types.
fn claim_of(s: &SandboxEntry) -> (Option<ClaimStatus>, Option<u32>) {
    let claim = s
        .detail
        .get("claim")
        .and_then(|c| ClaimStatus::deserialize(c).ok());
    let iteration = s
        .detail
        .get("iteration")
        .and_then(|n| u32::deserialize(n).ok());
    (claim, iteration)
}

/// The table's columns.
const COLUMNS: [&str; 7] = [
    "ID",
    "ENGINE",
    "STATE",
    "ITERATION",
    "CREATED",
    "HARNESS",
    "NOTE",
];

/// When `s` was created, as `YYYY-MM-DD HH:MM` (UTC): the local engine records seconds, the
/// container engines their own timestamp (RFC 3339 or `YYYY-MM-DD HH:MM:SS …`).
fn created(s: &SandboxEntry) -> String {
    match &s.detail["created"] {
        serde_json::Value::Number(n) => {
            let (y, m, d, hh, mm, _) = crate::report::utc(n.as_u64().unwrap_or(0));
            format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}")
        }
        serde_json::Value::String(t) if t.len() >= 16 => t[..16].replace('T', " "),
        _ => "-".into(),
    }
}

/// One row of the table, each cell escaped.
fn row(s: &SandboxEntry) -> [String; 7] {
    let (claim, iteration) = claim_of(s);
    let harness = claim
        .and_then(|c| c.plan)
        .and_then(|p| p.harness)
        .map(|h| h.display().to_string());
    let cells = [
        s.id.clone(),
        s.engine.clone(),
        s.state.clone(),
        iteration.map_or_else(|| "-".into(), |n| n.to_string()),
        created(s),
        harness.unwrap_or_else(|| "-".into()),
        s.detail["state_detail"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    ];
    cells.map(|c| escape_controls(&c).into_owned())
}

/// The list as an aligned table with a header; the last column is not padded.
fn table(list: &[SandboxEntry]) -> String {
    let rows: Vec<[String; 7]> = list.iter().map(row).collect();
    let mut widths = COLUMNS.map(str::len);
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header = COLUMNS.map(String::from);
    for r in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
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

/// Runs `pitcrew ps`; `quiet` (the global `-q`) prints the ids alone.
pub fn run(args: &PsArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    let (list, names) = list_sandboxes(&args.engine)?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&list)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if quiet && !args.json {
        for s in &list {
            outln!("{}", escape_controls(&s.id))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        outln!("no sandboxes ({})", names.join(", "))?;
        return Ok(ExitCode::SUCCESS);
    }
    out!("{}", table(&list))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, detail: serde_json::Value) -> SandboxEntry {
        SandboxEntry {
            id: id.into(),
            engine: "local".into(),
            running: true,
            state: "in-run".into(),
            detail,
        }
    }

    #[test]
    fn the_table_has_a_header_aligned_columns_and_escaped_cells() {
        let list = [
            entry(
                "pc-1",
                serde_json::json!({"created": 1_796_000_000u64, "iteration": 3,
                    "claim": {"run": "r", "state": "held",
                        "plan": {"harness": "/h/harness.yaml"}}}),
            ),
            entry(
                "pc-22222",
                serde_json::json!({"created": "2026-12-01T12:34:56.789Z",
                    "state_detail": "note\u{1b}[31m"}),
            ),
        ];
        let out = table(&list);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert!(
            lines[0].starts_with("ID        ENGINE  STATE   ITERATION  CREATED"),
            "{out}"
        );
        let cols = |l: &str| l.find("ENGINE").or_else(|| l.find("local"));
        assert_eq!(cols(lines[0]), cols(lines[1]));
        assert_eq!(cols(lines[1]), cols(lines[2]));
        assert!(lines[1].contains("2026-11-30 00:53"), "{out}");
        assert!(lines[1].contains("/h/harness.yaml"), "{out}");
        assert!(lines[2].contains("2026-12-01 12:34"), "{out}");
        assert!(lines[2].contains("  -  "), "{out}");
        assert!(!out.contains('\u{1b}'), "{out}");
    }
}
