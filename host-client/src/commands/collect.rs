//! `pitcrew collect SANDBOX [--iteration N] [--out DIR]`: fetch an iteration's record (the
//! latest by default) into `DIR/iteration-N/`, with the same safe unpack as `pitcrew run`. When
//! the sandbox's supervisor is gone, the record is read from the sandbox's storage (the local
//! engine's state directory, a stopped container) instead, `collect` says so and notes it
//! there as collected (a later `down` may then delete it). A record's `workspace/` arrives
//! stripped of what git would run on the host, and `collect` names what was removed.

use crate::engine::{EngineArgs, SandboxId};
use crate::output::{errln, outln};
use crate::records;
use crate::report;
use anyhow::Context as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `pitcrew collect`.
#[derive(Debug, clap::Args)]
pub struct CollectArgs {
    /// The sandbox id (or the container's name, with `--engine exec`).
    pub sandbox: String,
    /// Engine options.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Which iteration (default: the latest).
    #[arg(long, value_name = "N")]
    pub iteration: Option<u32>,
    /// Where to put it [default: the newest run directory of this sandbox under ./runs (a
    /// run's `<time>-<sandbox>`, next to the other records of that run), else runs/<sandbox>];
    /// the record goes to DIR/iteration-N.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print the record's summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Tells the supervisor the host now holds the record unpacked in `staging` (a stop deletes no
/// record the host never collected).
fn acknowledge(conn: &mut crate::engine::Connection, iteration: u32) -> anyhow::Result<()> {
    if !conn.supports("collected") {
        return Ok(());
    }
    conn.client()
        .collected(&[iteration])
        .map_err(|e| conn.explain(e))
}

/// Runs `pitcrew collect`; `quiet` (the global `-q`) prints the record's directory alone.
pub fn run(args: &CollectArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    let id = SandboxId(args.sandbox.clone());
    if let Some(out) = args.out.as_ref().filter(|o| o.exists() && !o.is_dir()) {
        anyhow::bail!("--out {}: not a directory", out.display());
    }
    let engine = args.engine.engine_for(&id)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| default_out(std::path::Path::new("runs"), &id.0));
    std::fs::create_dir_all(&out).with_context(|| format!("{}: create", out.display()))?;
    // The safe unpack wants an absolute destination.
    let out = std::fs::canonicalize(&out).with_context(|| format!("{}: resolve", out.display()))?;
    let staging = out.join(format!(".collect-{}", std::process::id()));
    match engine.connect(&id) {
        Ok(mut conn) => {
            let res = records::collect_into(&mut conn, args.iteration, &staging, None)
                .and_then(|_| place(&staging, &out));
            // Only once the record is in its place does the sandbox hear that the host holds it.
            let res = res.and_then(|(record, dest)| {
                acknowledge(&mut conn, record.iteration)?;
                Ok((record, dest))
            });
            conn.close();
            let (record, dest) = res?;
            return report_collected(args, quiet, &record, &dest);
        }
        // Its supervisor is gone: the record is read from the sandbox's storage, if the engine
        // can reach it.
        Err(err) => {
            let gone = engine.supervisor_gone(&id);
            let Some((_, mut tar)) = engine.stored_record(&id, args.iteration)? else {
                return Err(engine.explain_lost(&id, err));
            };
            errln!(
                "pitcrew: sandbox {}: {}; reading its record from its storage",
                report::escape_controls(&id.0),
                report::escape_controls(
                    &gone.map_or_else(|| "its supervisor does not answer".into(), |g| g.said())
                )
            );
            records::unpack_record(&mut tar, &staging)?;
        }
    }
    let (record, dest) = place(&staging, &out)?;
    // Held by the host now, as if the supervisor had sent it: a later `down` may delete it.
    if let Err(err) = engine.mark_stored_collected(&id, record.iteration) {
        errln!(
            "pitcrew: sandbox {}: {}",
            report::escape_controls(&id.0),
            report::escape_controls(&format!(
                "the record of iteration {} could not be noted as collected in its storage \
                 (`pitcrew down` keeps the sandbox for it; `--force` deletes it): {err:#}",
                record.iteration
            ))
        );
    }
    report_collected(args, quiet, &record, &dest)
}

/// Where a record of sandbox `id` goes without `--out`: the newest run directory of that
/// sandbox in `runs` (run ids are `<UTC time>-<sandbox>`, so they sort by time), else
/// `runs/<id>`.
fn default_out(runs: &std::path::Path, id: &str) -> PathBuf {
    let suffix = format!("-{id}");
    let newest = std::fs::read_dir(runs)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| name.ends_with(&suffix))
        .max();
    runs.join(newest.unwrap_or_else(|| id.to_string()))
}

/// Moves the record unpacked in `staging` to `<out>/iteration-N/` (replacing an earlier copy):
/// the record and where it is.
fn place(
    staging: &std::path::Path,
    out: &std::path::Path,
) -> anyhow::Result<(pitcrew_core::result::IterationResult, PathBuf)> {
    let record_path = staging.join("result.json");
    let record: pitcrew_core::result::IterationResult = std::fs::read(&record_path)
        .map_err(anyhow::Error::from)
        .and_then(|b| Ok(serde_json::from_slice(&b)?))
        .with_context(|| {
            format!(
                "{}: the collected record has no readable result.json",
                record_path.display()
            )
        })?;
    let n = record.iteration;
    let dest = out.join(format!("iteration-{n}"));
    if dest.exists() {
        // A record may be as deep as the agent's output was: removed in bounded descriptors.
        pitcrew_core::bounded_tree::remove_path(&dest)
            .with_context(|| format!("{}: remove the previous copy", dest.display()))?;
    }
    std::fs::rename(staging, &dest)
        .with_context(|| format!("{}: rename to {}", staging.display(), dest.display()))?;
    Ok((record, dest))
}

/// Prints what `collect` fetched: with `quiet`, the record's directory alone (what was
/// stripped from its workspace goes to stderr, as `run -q` warns of it).
fn report_collected(
    args: &CollectArgs,
    quiet: bool,
    record: &pitcrew_core::result::IterationResult,
    dest: &std::path::Path,
) -> anyhow::Result<ExitCode> {
    let n = record.iteration;
    let mut summary = report::summarize(record, None, Vec::new());
    summary.record_dir = Some(dest.display().to_string());
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&summary)?)?;
    } else if quiet {
        for line in summary.workspace_lines() {
            errln!("pitcrew: {}", report::escape_controls(&line));
        }
        outln!("{}", report::escape_controls(&dest.display().to_string()))?;
    } else {
        let line = format!(
            "iteration {n}: exit {} ({}), {}{} → {}",
            summary.exit_code,
            summary.meaning,
            summary.verification,
            summary.env_note(),
            dest.display()
        );
        outln!("{}", report::escape_controls(&line))?;
        for line in summary.workspace_lines() {
            outln!("{}", report::escape_controls(&line))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::default_out;

    #[test]
    fn without_out_a_record_joins_the_newest_run_of_its_sandbox() {
        let dir = tempfile::tempdir().unwrap();
        let runs = dir.path().join("runs");
        assert_eq!(default_out(&runs, "pc-1"), runs.join("pc-1"));
        for name in [
            "20261201T100000Z-pc-1",
            "20261201T110000Z-pc-1",
            "20261201T120000Z-pc-2",
        ] {
            std::fs::create_dir_all(runs.join(name)).unwrap();
        }
        assert_eq!(
            default_out(&runs, "pc-1"),
            runs.join("20261201T110000Z-pc-1")
        );
        assert_eq!(default_out(&runs, "pc-3"), runs.join("pc-3"));
    }
}
