//! `pitcrew logs SANDBOX [--follow]`: the supervisor's own log of a sandbox: the local engine's
//! `supervisor.log` in the state directory, a container's or Pod's output (`podman logs`,
//! `docker logs`, `kubectl logs`: PID 1 logs on stderr). With `--follow` it keeps printing
//! until the sandbox stops (or Ctrl-C). The log quotes paths and names from the sandbox, so
//! every line is escaped for the terminal (newlines and tabs kept).

use crate::engine::{Engine, EngineArgs, LogSource, SandboxId};
use crate::output::out;
use crate::report::escape_text;
use anyhow::Context as _;
use std::io::{BufReader, Seek as _};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

/// Arguments of `pitcrew logs`.
#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// The sandbox id.
    pub sandbox: String,
    /// Engine options.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Keep printing what the supervisor logs until the sandbox stops (or Ctrl-C).
    #[arg(long, short = 'f')]
    pub follow: bool,
}

/// How often a followed local log is read again.
const POLL: Duration = Duration::from_millis(200);

/// Runs `pitcrew logs`.
pub fn run(args: &LogsArgs) -> anyhow::Result<ExitCode> {
    let id = SandboxId(args.sandbox.clone());
    let engine = args.engine.engine_for(&id)?;
    match engine.log_source(&id, args.follow)? {
        LogSource::File(path) => file(&*engine, &id, &path, args.follow),
        LogSource::Command(cmd) => command(cmd),
    }
}

/// Prints what `reader` has until its end, escaped; a last line without its newline is kept
/// for the next read (a followed log may be mid-line).
fn print_lines(reader: &mut impl std::io::BufRead, partial: &mut Vec<u8>) -> anyhow::Result<()> {
    loop {
        let n = reader.read_until(b'\n', partial)?;
        if n == 0 || partial.last() != Some(&b'\n') {
            return Ok(());
        }
        out!("{}", escape_text(&String::from_utf8_lossy(partial)))?;
        partial.clear();
    }
}

/// The local engine's log file: printed, then (`follow`) read again every [`POLL`] until the
/// sandbox's supervisor is gone (or its state removed), and read a last time then.
fn file(
    engine: &dyn Engine,
    id: &SandboxId,
    path: &std::path::Path,
    follow: bool,
) -> anyhow::Result<ExitCode> {
    let f =
        std::fs::File::open(path).with_context(|| format!("sandbox {id}: {}", path.display()))?;
    let mut reader = BufReader::new(f);
    let mut partial = Vec::new();
    print_lines(&mut reader, &mut partial)?;
    if follow {
        loop {
            let running = engine
                .describe(id)
                .is_ok_and(|d| d["running"].as_bool() == Some(true));
            print_lines(&mut reader, &mut partial)?;
            if !running {
                break;
            }
            std::thread::sleep(POLL);
            // A file truncated under us is read again from its start.
            let len = reader.get_ref().metadata().map(|m| m.len()).unwrap_or(0);
            if reader.stream_position().is_ok_and(|pos| pos > len) {
                reader.rewind()?;
            }
        }
    }
    if !partial.is_empty() {
        out!("{}\n", escape_text(&String::from_utf8_lossy(&partial)))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// An engine's log command, its stdout and stderr through one pipe, printed escaped as it
/// comes; its exit code is `logs`'s (a failure says what it said).
fn command(mut cmd: std::process::Command) -> anyhow::Result<ExitCode> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let (read, write) = rustix::pipe::pipe().context("pipe")?;
    let write2 = write.try_clone().context("pipe")?;
    cmd.stdout(Stdio::from(write)).stderr(Stdio::from(write2));
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot run {program} (is it installed and on PATH?)"))?;
    // The write ends live in the child alone now: its exit ends the reads.
    drop(cmd);
    let mut reader = BufReader::new(std::fs::File::from(read));
    let mut partial = Vec::new();
    let printed = print_lines(&mut reader, &mut partial).and_then(|()| {
        if !partial.is_empty() {
            out!("{}\n", escape_text(&String::from_utf8_lossy(&partial)))?;
        }
        Ok(())
    });
    if printed.is_err() {
        // Our stdout is gone: the command has nobody to print for.
        let _ = child.kill();
    }
    let status = child
        .wait()
        .with_context(|| format!("wait for {program}"))?;
    printed?;
    if !status.success() {
        anyhow::bail!("{program} logs: {status}");
    }
    Ok(ExitCode::SUCCESS)
}
