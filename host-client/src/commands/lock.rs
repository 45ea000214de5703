//! `pitcrew lock HARNESS [--refresh] [--json]`: fetches every remote entry of a harness into the cache,
//! verifies each against its pin and writes the lock file (`<harness>.lock`) that `validate`,
//! `run` and `batch` then resolve from offline.

use crate::commands::validate::print_problems;
use crate::hash_progress;
use crate::output::{errln, outln};
use crate::remote::{self, FetchingSources, Settings};
use crate::report::escape_controls;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `pitcrew lock`.
#[derive(Debug, clap::Args)]
pub struct LockArgs {
    /// The harness file (YAML).
    pub harness: PathBuf,
    /// Fetch every remote entry again, even those the cache holds.
    #[arg(long)]
    pub refresh: bool,
    /// Print what was fetched, the lock file written and the harness's problems and notes as
    /// JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `pitcrew lock`: exit 0 when every remote entry was resolved and the harness is clean,
/// 1 otherwise. The lock file is written when every remote entry was resolved (other problems
/// of the harness are reported, not in the way).
pub fn run(args: &LockArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    let settings = Settings::from_env().map_err(anyhow::Error::msg)?;
    let mut sources = FetchingSources::new(settings, args.refresh);
    let validated = hash_progress::watch(quiet, |p| {
        pitcrew_core::harness::validate_with(&args.harness, p, &mut sources)
    })?;
    let file = args.harness.display().to_string();
    // What was done, said on stdout: a closed stdout does not stop the lock file's write.
    let say = |text: String| {
        if !quiet && !args.json {
            let _ = outln!("{}", escape_controls(&text));
        }
    };
    for fetched in &sources.fetched {
        say(format!("fetched {fetched}"));
    }
    for note in &validated.notes {
        say(format!("{file}:{note} (note)"));
    }
    let lock_path = remote::lock_path(&args.harness);
    let mut written = None;
    if sources.failures == 0 && sources.resolved() > 0 {
        let lock = sources.lock(&args.harness);
        crate::remote::write_lock(&lock_path, &lock).map_err(anyhow::Error::msg)?;
        say(format!(
            "wrote {} ({} remote source{})",
            lock_path.display(),
            lock.entries.len(),
            if lock.entries.len() == 1 { "" } else { "s" }
        ));
        written = Some(lock.entries.len());
    } else if sources.failures == 0 {
        say(format!("{file}: no remote sources: nothing to lock"));
    }
    if args.json {
        let doc = serde_json::json!({
            "harness": file,
            "ok": validated.is_ok(),
            "fetched": sources.fetched.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "lock_file": written.map(|_| lock_path.display().to_string()),
            "entries": written.unwrap_or(0),
            "unresolved": sources.failures,
            "problems": validated.problems,
            "notes": validated.notes,
        });
        // A closed stdout ends the printing only: the lock file is written.
        let _ = outln!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(if validated.is_ok() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    if validated.is_ok() {
        Ok(ExitCode::SUCCESS)
    } else {
        print_problems(&file, &validated);
        if sources.failures > 0 {
            errln!(
                "{}: {} not written: {} remote source{} not resolved",
                escape_controls(&file),
                escape_controls(&lock_path.display().to_string()),
                sources.failures,
                if sources.failures == 1 { "" } else { "s" }
            );
        }
        Ok(ExitCode::FAILURE)
    }
}
