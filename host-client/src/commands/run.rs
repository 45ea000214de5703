//! `pitcrew run HARNESS [--engine local|exec] [--iterations N] [--keep] [--json]`.
//!
//! Validate the harness (refuse on problems), start or attach to a sandbox, compute the manifest
//! for the engine's layout, upload every plugin and skills tree, the adapters and the workspace,
//! set the manifest, then run iterations: up to N, stopping early when the harness's
//! `validation` command exits 0 after one. Each iteration is collected into
//! `<output>/<run id>/iteration-N/`. Ctrl-C sends `cancel`, collects what there is and exits 130.

use crate::client::RunUpdate;
use crate::engine::{ignore_sigpipe, Connection, Engine, EngineArgs, SandboxId, SandboxSpec};
use crate::records;
use crate::report::{self, escape_controls, EscapedStream, IterationSummary};
use crate::tarball;
use anyhow::{bail, Context as _};
use pitcrew_core::harness::{self, Harness, Validated};
use pitcrew_core::manifest::Manifest;
use pitcrew_core::protocol::{Channel, Owner};
use std::collections::BTreeMap;
use std::io::{IsTerminal as _, Write as _};
use std::os::fd::AsFd as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Arguments of `pitcrew run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The harness file (YAML).
    pub harness: PathBuf,
    /// Engine options.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Exec engine: the existing sandbox to attach to.
    #[arg(long, value_name = "NAME")]
    pub sandbox: Option<String>,
    /// Local engine: pass this variable of pitcrew's own environment into the new sandbox
    /// (repeatable). Nothing else of it reaches the sandbox but `PATH`, the locale (`LANG`,
    /// `LANGUAGE`, the `LC_*` categories), `TZ` and `RUST_LOG`.
    #[arg(long = "pass-env", value_name = "NAME")]
    pub pass_env: Vec<String>,
    /// Run at most N iterations (overrides the harness's `iterations`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub iterations: Option<u32>,
    /// Keep the sandbox running at the end (its id is printed) for `inspect`, `collect`, `down`.
    #[arg(long)]
    pub keep: bool,
    /// Print one JSON document with the whole run instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Why the loop stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
enum Stopped {
    /// All N iterations ran.
    Iterations,
    /// The validation command exited 0.
    Validation,
    /// Ctrl-C.
    Cancelled,
}

/// Set by the Ctrl-C handler.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

type CancelSlot = Arc<Mutex<Option<crate::client::Canceller<std::process::ChildStdin>>>>;

/// Ctrl-C: the first sends `cancel` to the running iteration (the loop then collects and exits
/// 130); the second exits at once.
fn install_ctrlc(slot: CancelSlot) {
    let res = ctrlc::set_handler(move || {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            eprintln!("pitcrew: interrupted again; exiting without collecting");
            std::process::exit(130);
        }
        eprintln!("pitcrew: interrupted; cancelling the iteration (Ctrl-C again to quit now)");
        let guard = slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = guard.as_ref() {
            if let Err(e) = c.cancel() {
                eprintln!("pitcrew: cancel: {}", escape_controls(&e.to_string()));
            }
        }
    });
    if let Err(e) = res {
        tracing::warn!("cannot install the Ctrl-C handler: {e}");
    }
}

/// Progress for people: a status line on a terminal, plain lines otherwise. Everything it
/// prints is escaped for the terminal ([`escape_controls`]): messages quote the supervisor's
/// events, reasons and drifted names, and the agent's output is the agent's.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    verbose: bool,
    /// The agent's stdout and stderr, each escaped as a stream.
    streams: Mutex<[EscapedStream; 2]>,
}

impl Progress {
    fn new(verbose: bool) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = indicatif::ProgressBar::new_spinner();
            b.enable_steady_tick(std::time::Duration::from_millis(120));
            b
        });
        Progress {
            bar,
            verbose,
            streams: Mutex::default(),
        }
    }

    /// A line that stays.
    fn line(&self, msg: &str) {
        let msg = escape_controls(msg);
        match &self.bar {
            Some(b) => b.println(format!("pitcrew: {msg}")),
            None => eprintln!("pitcrew: {msg}"),
        }
    }

    /// The current status: a transient status line on a terminal; otherwise a plain line with
    /// `-v` only (the lines that stay say what happened).
    fn status(&self, msg: &str) {
        let msg = escape_controls(msg);
        match &self.bar {
            Some(b) => b.set_message(msg.into_owned()),
            None if self.verbose => eprintln!("pitcrew: {msg}"),
            None => {}
        }
    }

    /// The agent's output (only with `-v`), its lines kept and every other control escaped.
    fn output(&self, channel: Channel, bytes: &[u8]) {
        let text = {
            let mut streams = self
                .streams
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let i = usize::from(matches!(channel, Channel::Stderr));
            streams[i].push(bytes)
        };
        if text.is_empty() {
            return;
        }
        let write = || {
            let mut e = std::io::stderr().lock();
            let _ = e.write_all(text.as_bytes());
            let _ = e.flush();
        };
        match &self.bar {
            Some(b) => b.suspend(write),
            None => write(),
        }
    }

    fn finish(&self) {
        let tails: Vec<String> = self
            .streams
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter_mut()
            .map(EscapedStream::finish)
            .filter(|t| !t.is_empty())
            .collect();
        for t in tails {
            eprintln!("{t}");
        }
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// A UTC timestamp `YYYYMMDDTHHMMSSZ` (run ids sort by time).
fn utc_stamp() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Runs `pitcrew run`.
pub fn run(args: &RunArgs, verbose: u8) -> anyhow::Result<ExitCode> {
    ignore_sigpipe();
    let validated = harness::validate(&args.harness)?;
    let file = args.harness.display().to_string();
    if !validated.is_ok() {
        for p in &validated.problems {
            eprintln!("{}", escape_controls(&format!("{file}:{p}")));
        }
        bail!(
            "{file}: {} problem(s); nothing was started",
            validated.problems.len()
        );
    }
    let Some(h) = validated.harness.clone() else {
        bail!("{file}: not a harness");
    };
    if let Some(problem) = pass_env_conflict(&args.pass_env, &h) {
        bail!("{problem}");
    }
    let slot: CancelSlot = Arc::new(Mutex::new(None));
    install_ctrlc(Arc::clone(&slot));

    let engine = args.engine.engine()?;
    let progress = Progress::new(verbose > 0);
    progress.status(&format!("starting a {} sandbox", engine.name()));
    let id = engine.start(&SandboxSpec {
        existing: args.sandbox.clone(),
        pass_env: args.pass_env.clone(),
    })?;
    progress.line(&format!("sandbox {id} ({})", engine.name()));

    let outcome = drive(
        args, verbose, &*engine, &id, &validated, &h, &progress, &slot,
    );
    progress.finish();
    slot.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();

    let stop = if args.keep {
        Ok(Default::default())
    } else {
        engine.stop(&id, false)
    };
    match stop {
        Ok(outcome) => {
            if let Some(why) = outcome.warning {
                eprintln!(
                    "pitcrew: sandbox {}: {}",
                    escape_controls(&id.0),
                    escape_controls(&why)
                );
            }
        }
        Err(e) => eprintln!("pitcrew: {}", escape_controls(&format!("{e:#}"))),
    }
    let report = outcome?;
    let code = report.exit_code;
    let doc = serde_json::json!({
        "run_id": report.run_id,
        "harness": file,
        "engine": engine.name(),
        "sandbox": id.0,
        "kept": args.keep,
        "run_dir": report.run_dir,
        "stopped": report.stopped,
        "exit_code": code,
        "iterations": report.rows,
    });
    let doc_text = serde_json::to_string_pretty(&doc)?;
    let written = records::open_run_dir(&h.base, &h.output, &report.run_id)
        .and_then(|(_, dir)| Ok(records::write_in(&dir, "run.json", doc_text.as_bytes())?));
    if let Err(e) = written {
        tracing::warn!(
            "{}/run.json: {}",
            escape_controls(&report.run_dir),
            escape_controls(&format!("{e:#}"))
        );
    }
    if args.json {
        println!("{doc_text}");
    } else {
        print!("{}", report::table(&report.rows));
        println!("records: {}", escape_controls(&report.run_dir));
        if args.keep {
            let id = escape_controls(&id.0);
            println!("sandbox kept: {id} (pitcrew inspect {id}; pitcrew down {id})");
        }
    }
    Ok(ExitCode::from(code))
}

struct RunReport {
    run_id: String,
    run_dir: String,
    rows: Vec<IterationSummary>,
    stopped: Stopped,
    exit_code: u8,
}

#[allow(clippy::too_many_arguments)]
fn drive(
    args: &RunArgs,
    verbose: u8,
    engine: &dyn Engine,
    id: &SandboxId,
    validated: &Validated,
    h: &Harness,
    progress: &Progress,
    slot: &CancelSlot,
) -> anyhow::Result<RunReport> {
    let layout = engine.layout(id)?;
    let manifest = validated
        .manifest(&layout)
        .context("the harness has problems")?;
    manifest
        .validate()
        .context("the manifest built from this harness is invalid")?;

    let mut conn = engine.connect(id)?;
    *slot
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(conn.client().canceller());
    upload_all(&mut conn, validated, h, &manifest, progress)?;
    conn.client()
        .set_manifest(&manifest)
        .map_err(|e| conn.explain(e))?;

    let run_id = format!("{}-{}", utc_stamp(), path_safe(&id.0));
    // Created without following links: `output:` stays inside the harness directory.
    let (run_dir, _) = records::open_run_dir(&h.base, &h.output, &run_id)?;
    let total = args.iterations.unwrap_or(h.iterations);
    let mut rows = Vec::new();
    let mut stopped = Stopped::Iterations;
    let mut validation_passed = false;
    for n in 1..=total {
        if INTERRUPTED.load(Ordering::SeqCst) {
            stopped = Stopped::Cancelled;
            break;
        }
        let started = Instant::now();
        let mut events = Vec::new();
        let outcome = conn
            .client()
            .run(|u| match u {
                RunUpdate::Event {
                    iteration,
                    step,
                    state,
                    detail,
                } => {
                    let at_ms = started.elapsed().as_secs_f64() * 1000.0;
                    events.push(serde_json::json!({"step": step, "state": state, "at_ms": at_ms}));
                    let detail = if detail.is_null() {
                        String::new()
                    } else {
                        let s = detail.to_string();
                        if s.len() > 120 {
                            String::new()
                        } else {
                            format!(" {s}")
                        }
                    };
                    progress.status(&format!(
                        "iteration {iteration}/{total}: {step} {state}{detail}"
                    ));
                }
                RunUpdate::Output { channel, bytes } => {
                    if verbose > 0 && matches!(channel, Channel::Stdout | Channel::Stderr) {
                        progress.output(channel, bytes);
                    }
                }
            })
            .map_err(|e| conn.explain(e))?;
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut row = report::summarize(&outcome.record, duration_ms, events);
        let dest = run_dir.join(format!("iteration-{}", outcome.iteration));
        progress.status(&format!("iteration {}: collecting", outcome.iteration));
        // Checked again before every collect: the validation command runs on the host between
        // iterations and may have swapped the run directory for a link.
        let collected = records::open_run_dir(&h.base, &h.output, &run_id)
            .and_then(|_| records::collect_into(&mut conn, Some(outcome.iteration), &dest));
        match collected {
            Ok(()) => row.record_dir = Some(dest.display().to_string()),
            Err(e) => progress.line(&format!("iteration {}: {e:#}", outcome.iteration)),
        }
        progress.line(&format!(
            "iteration {}: exit {} ({}), {}",
            row.iteration, row.exit_code, row.meaning, row.verification
        ));
        if !row.workspace_config.is_empty() {
            progress.line(&format!(
                "iteration {}: the agent's runtime read unverified configuration from the workspace: {}",
                row.iteration,
                row.workspace_config.join(", ")
            ));
        }
        let cancelled = INTERRUPTED.load(Ordering::SeqCst);
        if !cancelled {
            if let Some(argv) = &h.validation {
                let code = run_validation(argv, h, engine, id, &layout.root, &dest)?;
                row.validation_exit = Some(code);
                progress.line(&format!("iteration {n}: validation exited {code}"));
                validation_passed = code == 0;
            }
        }
        rows.push(row);
        if cancelled {
            stopped = Stopped::Cancelled;
            break;
        }
        if validation_passed {
            stopped = Stopped::Validation;
            break;
        }
    }
    conn.close();
    let last = rows.last().map_or(125, |r| r.exit_code);
    let exit_code = match stopped {
        Stopped::Cancelled => 130,
        _ if validation_passed || last == 0 => 0,
        _ => u8::try_from(last.clamp(1, 255)).unwrap_or(1),
    };
    Ok(RunReport {
        run_id,
        run_dir: run_dir.display().to_string(),
        rows,
        stopped,
        exit_code,
    })
}

/// Uploads plugins, skills, adapters (one small tar per destination directory) and the
/// workspace (owned by the agent).
fn upload_all(
    conn: &mut Connection,
    v: &Validated,
    h: &Harness,
    manifest: &Manifest,
    progress: &Progress,
) -> anyhow::Result<()> {
    let mut trees: Vec<(&Path, String)> = Vec::new();
    for (p, pin) in v.plugins.iter().zip(&manifest.trees) {
        trees.push((&p.spec.host_path, pin.path.clone()));
    }
    for (s, pin) in v
        .skills
        .iter()
        .zip(manifest.trees.iter().skip(v.plugins.len()))
    {
        trees.push((&s.spec.host_path, pin.path.clone()));
    }
    for (host, dest) in trees {
        progress.status(&format!("uploading {} → {dest}", host.display()));
        conn.client()
            .upload(&dest, None, |w| tarball::write_tree(w, host))
            .map_err(|e| conn.explain(e))?;
    }
    // Adapters: each destination directory receives one tar with its files.
    let mut by_dir: BTreeMap<String, Vec<(String, &Path)>> = BTreeMap::new();
    for (a, pin) in v.adapters.iter().zip(&manifest.files) {
        let (dir, name) = pin
            .path
            .rsplit_once('/')
            .with_context(|| format!("adapter destination {} has no directory", pin.path))?;
        by_dir
            .entry(dir.to_string())
            .or_default()
            .push((name.to_string(), &a.spec.host_path));
    }
    for (dir, files) in &by_dir {
        progress.status(&format!(
            "uploading {} adapter file(s) → {dir}",
            files.len()
        ));
        conn.client()
            .upload(dir, None, |w| tarball::write_files(w, files))
            .map_err(|e| conn.explain(e))?;
    }
    if let Some(work) = &h.workdir {
        progress.status(&format!(
            "uploading workspace {} → {}",
            work.display(),
            manifest.workdir
        ));
        let owner = Owner {
            uid: manifest.user.uid,
            gid: manifest.user.gid,
        };
        conn.client()
            .upload(&manifest.workdir, Some(owner), |w| {
                tarball::write_tree(w, work)
            })
            .map_err(|e| conn.explain(e))?;
    }
    Ok(())
}

/// A `--pass-env` name the harness sets too (its `env:` or a plugin's `env:`, applied after the
/// baseline): the passed value would silently lose.
fn pass_env_conflict(pass: &[String], h: &Harness) -> Option<String> {
    pass.iter().find_map(|name| {
        if h.env.contains_key(name) {
            return Some(format!(
                "--pass-env {name}: the harness `env:` sets {name} too, and its value would win; keep one"
            ));
        }
        let plugin = h.plugins.iter().find(|p| p.env.contains_key(name))?;
        Some(format!(
            "--pass-env {name}: plugin {} sets {name} in its `env:`, and its value would win; keep one",
            plugin.name
        ))
    })
}

/// Runs the harness's validation command on the host (cwd = the harness directory, its stdout
/// sent to stderr so `--json` stays clean). It sees `PITCREW_ITERATION`,
/// `PITCREW_RECORD_DIR` (the collected record), `PITCREW_SANDBOX`, `PITCREW_ENGINE` and
/// `PITCREW_SANDBOX_ROOT` (the uploads root inside the sandbox; a host path for the local
/// engine).
fn run_validation(
    argv: &[String],
    h: &Harness,
    engine: &dyn Engine,
    id: &SandboxId,
    root: &str,
    record_dir: &Path,
) -> anyhow::Result<i32> {
    let (program, rest) = argv.split_first().context("validation: empty command")?;
    let iteration = record_dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("iteration-"))
        .unwrap_or_default()
        .to_string();
    let stdout = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map_or_else(|_| Stdio::null(), Stdio::from);
    let status = Command::new(program)
        .args(rest)
        .current_dir(&h.base)
        .env("PITCREW_ITERATION", iteration)
        .env("PITCREW_RECORD_DIR", record_dir)
        .env("PITCREW_SANDBOX", &id.0)
        .env("PITCREW_ENGINE", engine.name())
        .env("PITCREW_SANDBOX_ROOT", root)
        .stdin(Stdio::null())
        .stdout(stdout)
        .status()
        .with_context(|| format!("validation: cannot run {program:?} in {}", h.base.display()))?;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// `name` as one path component: anything but ASCII letters, digits, `.`, `_` and `-` becomes
/// `_` (an exec-engine sandbox may be named by a path or a `pod/container` pair).
fn path_safe(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    safe.trim_start_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::{pass_env_conflict, path_safe};

    #[test]
    fn a_passed_name_the_harness_or_a_plugin_sets_is_a_conflict() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("p")).unwrap();
        std::fs::write(
            dir.path().join("p/index.js"),
            "module.exports = () => {};\n",
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("w")).unwrap();
        let yaml = "runtime: command\ncommand: [/bin/true]\nworkdir: w\nenv:\n  A: \"1\"\nplugins:\n  - path: p\n    env:\n      B: \"2\"\n";
        std::fs::write(dir.path().join("h.yaml"), yaml).unwrap();
        let validated = pitcrew_core::harness::validate(&dir.path().join("h.yaml")).unwrap();
        let h = validated.harness.expect("a valid harness");
        assert_eq!(
            pass_env_conflict(&["A".into()], &h).unwrap(),
            "--pass-env A: the harness `env:` sets A too, and its value would win; keep one"
        );
        assert_eq!(
            pass_env_conflict(&["C".into(), "B".into()], &h).unwrap(),
            "--pass-env B: plugin p sets B in its `env:`, and its value would win; keep one"
        );
        assert_eq!(pass_env_conflict(&["C".into()], &h), None);
    }

    #[test]
    fn sandbox_names_become_one_path_component() {
        assert_eq!(path_safe("pc-1a2b3c4d"), "pc-1a2b3c4d");
        assert_eq!(path_safe("/run/x/control.sock"), "_run_x_control.sock");
        assert_eq!(path_safe("ns/pod:ctr"), "ns_pod_ctr");
        assert_eq!(path_safe("../up"), "_up");
    }
}
