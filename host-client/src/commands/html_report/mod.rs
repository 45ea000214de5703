//! `pitcrew report RUN_DIR|BATCH_DIR [--output FILE] [--json]`: one self-contained HTML page
//! of what a run or a batch left on disk, to look at in a browser.
//!
//! A run directory (what `pitcrew run` collects: `run.json` and `iteration-N/result.json`)
//! becomes each iteration's timeline of steps with durations, its exit code and what it means,
//! verification, processes reaped, environment removed or refused, and tokens and cost. A batch
//! directory (`pitcrew batch`: `batch.json`, `<job>/job.json`) becomes its jobs with status
//! filters, a histogram of their durations, their attempts and the total cost.
//!
//! The page needs nothing else: no network, no script, no external style or font (the status
//! filters are radio buttons and CSS). Everything read from the records (names, reasons,
//! command lines, paths: much of it the agent's to choose) is HTML-escaped, its control and
//! bidi characters written as escapes first. The file is written atomically, owner-only: it
//! shows what the records show.

mod html;
mod load;
mod render;

use crate::output::outln;
use anyhow::Context as _;
use pitcrew_core::record_names::RESULT_FILE;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `pitcrew report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// A run's records directory (`run.json`, `iteration-N/`) or a batch directory
    /// (`batch.json`, one directory per job with its `job.json`).
    #[arg(value_name = "RUN_DIR|BATCH_DIR", value_hint = clap::ValueHint::DirPath)]
    pub dir: PathBuf,
    /// Where to write the HTML file [default: `report.html` in the directory].
    #[arg(long, short, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub output: Option<PathBuf>,
    /// Print `{"path": …}` instead of the path alone.
    #[arg(long)]
    pub json: bool,
}

/// Runs `pitcrew report`.
pub fn run(args: &ReportArgs) -> anyhow::Result<ExitCode> {
    let page = page_of(&args.dir)?;
    let path = args
        .output
        .clone()
        .unwrap_or_else(|| args.dir.join("report.html"));
    pitcrew_core::atomic_file::write(&path, page.as_bytes(), 0o600)
        .with_context(|| format!("{}: writing the report", path.display()))?;
    if args.json {
        outln!(
            "{}",
            serde_json::json!({ "path": path.display().to_string() })
        )?;
    } else {
        outln!(
            "{}",
            crate::report::escape_controls(&path.display().to_string())
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The HTML page of the run or batch directory `dir`, or an error naming it (and what it
/// looked for) when it is neither, or a record in it cannot be read.
pub fn page_of(dir: &Path) -> anyhow::Result<String> {
    let meta = std::fs::metadata(dir).with_context(|| format!("{}", dir.display()))?;
    if !meta.is_dir() {
        anyhow::bail!(
            "{}: not a directory (give a run's records directory or a batch directory)",
            dir.display()
        );
    }
    match load::kind_of(dir)? {
        Some(load::Kind::Run) => Ok(render::run_page(&load::run(dir)?)),
        Some(load::Kind::Batch) => Ok(render::batch_page(&load::batch(dir)?)),
        None if dir.join(RESULT_FILE).is_file() => anyhow::bail!(
            "{}: one iteration's record; give the run directory that holds it ({})",
            dir.display(),
            dir.parent().unwrap_or(dir).display()
        ),
        None => anyhow::bail!(
            "{}: neither a run directory (run.json, iteration-N/result.json) nor a batch \
             directory (batch.json, <job>/job.json)",
            dir.display()
        ),
    }
}

#[cfg(test)]
mod tests;
