//! `pitcrew logs SANDBOX [--follow]`: the supervisor's own log of a sandbox: the local engine's
//! `supervisor.log` in the state directory, a container's or Pod's output (`podman logs`,
//! `docker logs`, `kubectl logs`: PID 1 logs on stderr). With `--follow` it keeps printing
//! until the sandbox stops (or Ctrl-C). The log quotes paths and names from the sandbox, so
//! every line is escaped for the terminal (newlines and tabs kept); with `--json` each line is
//! one JSON object, `{"sandbox": ID, "line": TEXT}` (TEXT without its newline).

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
    /// Print each line as one JSON object: {"sandbox": ID, "line": TEXT}.
    #[arg(long)]
    pub json: bool,
}

/// How a log line is printed: escaped for the terminal, or as a JSON object naming the
/// sandbox.
struct Printer {
    /// `Some(id)` with `--json`.
    json: Option<String>,
    /// How many lines it printed.
    printed: std::cell::Cell<usize>,
}

impl Printer {
    /// Prints one line of the log (`text` with or without its newline).
    fn line(&self, text: &[u8]) -> anyhow::Result<()> {
        self.printed.set(self.printed.get() + 1);
        let text = String::from_utf8_lossy(text);
        match &self.json {
            Some(id) => {
                let line = text.strip_suffix('\n').unwrap_or(&text);
                let line = line.strip_suffix('\r').unwrap_or(line);
                out!("{}\n", serde_json::json!({"sandbox": id, "line": line}))?;
            }
            None if text.ends_with('\n') => out!("{}", escape_text(&text))?,
            None => out!("{}\n", escape_text(&text))?,
        }
        Ok(())
    }
}

/// How often a followed local log is read again.
const POLL: Duration = Duration::from_millis(200);

/// Runs `pitcrew logs`.
pub fn run(args: &LogsArgs) -> anyhow::Result<ExitCode> {
    let id = SandboxId(args.sandbox.clone());
    let engine = args.engine.engine_for(&id)?;
    let printer = Printer {
        json: args.json.then(|| id.0.clone()),
        printed: std::cell::Cell::new(0),
    };
    match engine.log_source(&id, args.follow)? {
        LogSource::File(path) => file(&*engine, &id, &path, args.follow, &printer),
        LogSource::Command(cmd) => {
            let code = command(cmd, &printer)?;
            if args.follow {
                // `podman logs --follow` can end with its container before it has read the
                // container's last lines (the supervisor's own, as it stops): the whole log is
                // read again and what the follow did not print is printed. A container removed
                // meanwhile has no log any more, and nothing is added.
                if let Ok(LogSource::Command(again)) = engine.log_source(&id, false) {
                    rest(again, printer.printed.get(), &printer)?;
                }
            }
            Ok(code)
        }
    }
}

/// Prints what `reader` has until its end, escaped; a last line without its newline is kept
/// for the next read (a followed log may be mid-line).
fn print_lines(
    reader: &mut impl std::io::BufRead,
    partial: &mut Vec<u8>,
    printer: &Printer,
) -> anyhow::Result<()> {
    loop {
        let n = reader.read_until(b'\n', partial)?;
        if n == 0 || partial.last() != Some(&b'\n') {
            return Ok(());
        }
        printer.line(partial)?;
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
    printer: &Printer,
) -> anyhow::Result<ExitCode> {
    let f =
        std::fs::File::open(path).with_context(|| format!("sandbox {id}: {}", path.display()))?;
    let mut reader = BufReader::new(f);
    let mut partial = Vec::new();
    print_lines(&mut reader, &mut partial, printer)?;
    if follow {
        loop {
            let running = engine
                .describe(id)
                .is_ok_and(|d| d["running"].as_bool() == Some(true));
            print_lines(&mut reader, &mut partial, printer)?;
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
        printer.line(&partial)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// An engine's log command, its stdout and stderr through one pipe, printed escaped as it
/// comes; its exit code is `logs`'s (a failure says what it said).
fn command(cmd: std::process::Command, printer: &Printer) -> anyhow::Result<ExitCode> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let (mut child, read) = spawn_merged(cmd)?;
    let mut reader = BufReader::new(read);
    let mut partial = Vec::new();
    let printed = print_lines(&mut reader, &mut partial, printer).and_then(|()| {
        if !partial.is_empty() {
            printer.line(&partial)?;
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

/// Spawns `cmd` with its stdout and stderr through one pipe: the child and the pipe's read end,
/// which ends when the child exits.
fn spawn_merged(
    mut cmd: std::process::Command,
) -> anyhow::Result<(std::process::Child, std::fs::File)> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let (read, write) = rustix::pipe::pipe().context("pipe")?;
    let write2 = write.try_clone().context("pipe")?;
    cmd.stdout(Stdio::from(write)).stderr(Stdio::from(write2));
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot run {program} (is it installed and on PATH?)"))?;
    // The write ends live in the child alone now: its exit ends the reads.
    drop(cmd);
    Ok((child, std::fs::File::from(read)))
}

/// The whole log again (`cmd` without `--follow`), once the followed one ended: its lines after
/// the first `seen` are printed. A command that fails (the container is gone) adds nothing; what
/// it said is not the log.
fn rest(cmd: std::process::Command, seen: usize, printer: &Printer) -> anyhow::Result<()> {
    let Ok((mut child, mut read)) = spawn_merged(cmd) else {
        return Ok(());
    };
    let mut all = Vec::new();
    let read_all = std::io::Read::read_to_end(&mut read, &mut all);
    let status = child.wait();
    if read_all.is_err() || !status.is_ok_and(|s| s.success()) {
        return Ok(());
    }
    for line in all.split_inclusive(|&b| b == b'\n').skip(seen) {
        printer.line(line)?;
    }
    Ok(())
}
