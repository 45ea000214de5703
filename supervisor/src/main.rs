//! `pitcrew-init`: the sandbox supervisor (PID 1 of the sandbox container).
//!
//! A thin edge: it parses the command line, sets up process-wide state in the right order
//! (baseline environment first, then signals before anything else), and either runs one
//! iteration (`run`), serves the control protocol (`serve`, the default with no subcommand:
//! the container entrypoint) or bridges stdio to the control socket (`attach`).

use clap::{Parser, Subcommand};
#[cfg(target_os = "linux")]
use pitcrew_core::sandbox::cgroup::CgroupMode;
use std::process::ExitCode;

/// The sandbox supervisor: reaps, verifies, sanitises, confines and launches the agent.
#[derive(Debug, Parser)]
#[command(name = "pitcrew-init", version, about)]
struct Cli {
    /// More log output on stderr (repeat for more); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// No subcommand: `serve` with the defaults.
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the tree hash of a directory (same output as `pitcrew hash`).
    Hash(pitcrew_core::hash_command::HashArgs),
    /// Run one iteration (reap, verify, environment, confine, launch, wait, judge, reap) and
    /// exit with its code.
    Run(RunArgs),
    /// Stay up as PID 1, reap continuously and serve the control protocol (the default).
    Serve(ServeArgs),
    /// Bridge stdin/stdout to the control socket (for `podman exec -i … pitcrew-init attach`).
    Attach(AttachArgs),
    /// Internal: makes a user and network namespace pair for the agent of an unprivileged
    /// supervisor and binds its listeners there (stdin: the supervisor's socket).
    #[command(name = "netns-helper", hide = true)]
    NetnsHelper,
}

/// Arguments of `serve`.
#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// The control socket (its directory is created 0700, root-owned).
    #[arg(long, default_value = pitcrew_core::server::DEFAULT_SOCKET)]
    socket: std::path::PathBuf,
    /// Where iteration records are kept until collected (created 0700).
    #[arg(long, default_value = pitcrew_core::server::DEFAULT_RECORDS)]
    records: std::path::PathBuf,
    /// Serve exactly one connection on stdin/stdout instead of the socket; exit when it closes.
    #[arg(long)]
    stdio: bool,
    /// Most entries accepted in one upload.
    #[arg(long, default_value_t = 100_000)]
    upload_max_entries: u64,
    /// Most bytes of file content accepted in one upload.
    #[arg(long, default_value_t = 4 << 30)]
    upload_max_bytes: u64,
    /// A fresh System V IPC namespace and a private tmpfs on /dev/shm before every iteration.
    /// For sandboxes that share the host's filesystem in their own mount namespace (the local
    /// engine); needs PID 1 and CAP_SYS_ADMIN.
    #[arg(long)]
    private_ipc: bool,
    /// An empty read-only tmpfs on /run (and /var/run where it is a directory of its own), at
    /// start: the host's Unix socket files there (D-Bus, nscd, systemd-resolved, databases) out
    /// of the agent's reach. For the local engine's sandboxes with a network namespace of their
    /// own; needs PID 1 with its own mount namespace.
    #[arg(long, conflicts_with = "unprivileged")]
    private_run: bool,
    /// Under someone else's init, as the sandbox's own non-root user (`serve --stdio` through
    /// an exec session): every process of this uid but the supervisor's ancestors is reaped
    /// before each iteration, whoever started it; the agent runs as this uid. Refused as root
    /// and as PID 1.
    #[arg(long, conflicts_with = "private_ipc")]
    unprivileged: bool,
    /// Whether each iteration's agent tree gets a cgroup of its own (memory and process limits
    /// counted for the tree alone), where the supervisor's cgroup is writable; `off` leaves the
    /// limits to rlimits (per uid, per process).
    #[arg(long, value_enum, default_value_t = CgroupMode::Auto)]
    agent_cgroup: CgroupMode,
}

/// Arguments of `attach`.
#[derive(Debug, clap::Args)]
struct AttachArgs {
    /// The control socket.
    #[arg(long, default_value = pitcrew_core::server::DEFAULT_SOCKET)]
    socket: std::path::PathBuf,
}

/// Arguments of `run`.
#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The manifest (JSON) to run.
    #[arg(long)]
    manifest: std::path::PathBuf,
    /// Write the result record here (atomically: a temporary file, then rename).
    #[arg(long, conflicts_with = "result_fd")]
    result: Option<std::path::PathBuf>,
    /// Write the result record to this inherited file descriptor.
    #[arg(long)]
    result_fd: Option<i32>,
    /// The iteration number recorded in the result.
    #[arg(long, default_value_t = 1)]
    iteration: u32,
    /// Whether each iteration's agent tree gets a cgroup of its own (memory and process limits
    /// counted for the tree alone), where the supervisor's cgroup is writable; `off` leaves the
    /// limits to rlimits (per uid, per process).
    #[arg(long, value_enum, default_value_t = CgroupMode::Auto)]
    agent_cgroup: CgroupMode,
}

fn main() -> ExitCode {
    // Before anything reads the environment: this may be the start again below.
    #[cfg(target_os = "linux")]
    let restarted = pitcrew_core::sandbox::heap::restore_environment();
    #[cfg(target_os = "linux")]
    pitcrew_core::sandbox::heap::one_malloc_arena();
    #[cfg(target_os = "linux")]
    let baseline = pitcrew_core::iteration::BaselineEnv::capture();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            // A bad `run` command line is a supervisor failure (125) like a bad manifest.
            let is_run = std::env::args_os().any(|a| a == "run");
            return match (err.use_stderr(), is_run) {
                (false, _) => ExitCode::SUCCESS,
                (true, true) => ExitCode::from(125),
                (true, false) => ExitCode::from(2),
            };
        }
    };
    let command = cli.command.unwrap_or_else(|| {
        Command::Serve(ServeArgs {
            socket: pitcrew_core::server::DEFAULT_SOCKET.into(),
            records: pitcrew_core::server::DEFAULT_RECORDS.into(),
            stdio: false,
            upload_max_entries: pitcrew_core::unpack::UnpackLimits::default().max_entries,
            upload_max_bytes: pitcrew_core::unpack::UnpackLimits::default().max_bytes,
            private_ipc: false,
            private_run: false,
            unprivileged: false,
            agent_cgroup: CgroupMode::Auto,
        })
    });
    // The long-lived supervisor starts again without glibc's per-thread cache, which would
    // pin freed heap pages for the sandbox's life; nothing has started yet.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    let heap_note = match &command {
        Command::Serve(_) if !restarted => {
            Some(pitcrew_core::sandbox::heap::exec_without_thread_cache())
        }
        _ => None,
    };
    #[cfg(all(target_os = "linux", not(target_env = "gnu")))]
    let heap_note = {
        let _ = restarted;
        None
    };
    match command {
        Command::Hash(args) => {
            // A command-line tool here, not PID 1 duties: `pitcrew-init hash … | head` ends quietly.
            pitcrew_core::logging::restore_default_sigpipe();
            pitcrew_core::logging::init(cli.verbose, false);
            match pitcrew_core::hash_command::run(&args, &mut std::io::stdout().lock()) {
                Ok(code) => code,
                Err(err) => {
                    pitcrew_core::say!("{err:#}");
                    ExitCode::FAILURE
                }
            }
        }
        #[cfg(target_os = "linux")]
        Command::Run(args) => linux::run(&args, cli.verbose, baseline),
        #[cfg(target_os = "linux")]
        Command::Serve(args) => linux::serve(&args, cli.verbose, baseline, heap_note),
        #[cfg(target_os = "linux")]
        Command::Attach(args) => {
            pitcrew_core::logging::restore_default_sigpipe();
            match pitcrew_core::server::attach::attach(&args.socket) {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    pitcrew_core::say!("attach: {err}");
                    ExitCode::FAILURE
                }
            }
        }
        #[cfg(target_os = "linux")]
        Command::NetnsHelper => {
            ExitCode::from(pitcrew_core::sandbox::netns_helper::helper_main().clamp(0, 255) as u8)
        }
        #[cfg(not(target_os = "linux"))]
        Command::Run(_) | Command::Serve(_) | Command::Attach(_) | Command::NetnsHelper => {
            pitcrew_core::say!("run, serve and attach are only available on Linux");
            ExitCode::from(125)
        }
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use super::{RunArgs, ServeArgs};
    use pitcrew_core::exit_code::SUPERVISOR_FAILED;
    use pitcrew_core::iteration::{run_iteration, BaselineEnv, NoopObserver, Supervisor};
    use pitcrew_core::manifest::Manifest;
    use pitcrew_core::record::Sink;
    use pitcrew_core::result::{IterationResult, SupervisorInfo, SupervisorMode};
    use pitcrew_core::sandbox::private_ipc::IpcReset;
    use pitcrew_core::sandbox::signals::Signals;
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::path::{Path, PathBuf};
    use std::process::ExitCode;
    use std::sync::OnceLock;

    /// What the panic hook needs to leave a record behind.
    struct PanicTarget {
        pid: u32,
        iteration: u32,
        file: Option<PathBuf>,
        fd: Option<i32>,
    }

    static PANIC_TARGET: OnceLock<PanicTarget> = OnceLock::new();

    fn exit(code: i32) -> ExitCode {
        ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
    }

    /// Panics must not unwind through PID 1: log, leave a record, exit 125.
    fn install_panic_hook() {
        std::panic::set_hook(Box::new(|info| {
            let target = PANIC_TARGET.get();
            if target.is_some_and(|t| t.pid != std::process::id()) {
                // A forked child (should never panic): leave the parent's record alone.
                // SAFETY: _exit is always safe to call; it does not return.
                unsafe { libc::_exit(SUPERVISOR_FAILED) };
            }
            let reason = format!("internal: panic: {info}");
            pitcrew_core::say!("{reason}");
            if let Some(t) = target {
                let mut record = IterationResult::new(
                    t.iteration,
                    SupervisorInfo {
                        pid1: t.pid == 1,
                        mode: if t.pid == 1 {
                            SupervisorMode::Pid1
                        } else {
                            SupervisorMode::Degraded
                        },
                        degraded_reason: None,
                    },
                );
                record.finish(SUPERVISOR_FAILED, Some(reason));
                let line = record.to_json_line();
                if let Some(path) = &t.file {
                    let _ = pitcrew_core::record::write_result_file(path, line.as_bytes());
                } else if let Some(fd) = t.fd {
                    // SAFETY: write from a valid buffer to the caller's result fd.
                    unsafe { libc::write(fd, line.as_ptr().cast(), line.len()) };
                }
            }
            std::process::exit(SUPERVISOR_FAILED);
        }));
    }

    fn write_record(sink: Sink, record: &IterationResult) {
        if let Err(err) = pitcrew_core::record::write(sink, record) {
            tracing::error!("result: could not write the record: {err}");
        }
    }

    /// Takes ownership of `--result-fd N` early, before we open anything that could reuse N.
    /// Standard streams (0–2) are duplicated instead, so the agent still inherits them.
    fn take_fd(fd: i32) -> Result<OwnedFd, String> {
        // SAFETY: F_GETFD only queries the flags of an fd number.
        if fd < 0 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            return Err(format!("--result-fd {fd} is not an open file descriptor"));
        }
        if fd <= 2 {
            // SAFETY: F_DUPFD_CLOEXEC creates a new fd that nothing else owns.
            let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
            if dup < 0 {
                return Err(format!(
                    "--result-fd {fd}: {}",
                    std::io::Error::last_os_error()
                ));
            }
            // SAFETY: `dup` was just created and is owned by nothing else.
            return Ok(unsafe { OwnedFd::from_raw_fd(dup) });
        }
        // SAFETY: the fd is open and nothing else in this process owns it (we have opened
        // nothing yet); it is marked close-on-exec so the agent never inherits it.
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            Ok(OwnedFd::from_raw_fd(fd))
        }
    }

    /// Says that the supervisor runs with glibc's per-thread cache after all, and why.
    fn log_heap_note(note: Option<std::io::Error>) {
        if let Some(err) = note {
            tracing::warn!(
                "supervisor: could not start again without glibc's per-thread cache \
                 (/proc/self/exe: {err}); freed memory may stay resident"
            );
        }
    }

    /// `pitcrew-init run`.
    pub fn run(args: &RunArgs, verbose: u8, baseline: BaselineEnv) -> ExitCode {
        // As PID 1 the supervisor changes to "/": make the caller's relative paths absolute.
        let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let manifest_path = absolute(&args.manifest);
        let result_path = args.result.as_deref().map(absolute);
        let (sink, sink_error) = match (&result_path, args.result_fd) {
            (Some(path), _) => (Sink::File(path.clone()), None),
            (None, Some(fd)) => match take_fd(fd) {
                Ok(fd) => (Sink::Fd(fd), None),
                Err(err) => (Sink::None, Some(err)),
            },
            (None, None) => (Sink::None, None),
        };
        // Then signals, before anything could start a thread (none may see an unblocked
        // signal). `--result-fd` was claimed first so the signalfd cannot take its number.
        let signals = Signals::install();
        let _ = PANIC_TARGET.set(PanicTarget {
            pid: std::process::id(),
            iteration: args.iteration,
            file: result_path.clone(),
            fd: args.result_fd,
        });
        install_panic_hook();
        pitcrew_core::logging::init(verbose, false);

        let signals = match signals {
            Ok(signals) => signals,
            Err(err) => {
                return fail_early(
                    sink,
                    args.iteration,
                    format!("internal: signal setup: {err}"),
                );
            }
        };
        let mut ctx = Supervisor::start(baseline, signals, args.agent_cgroup);
        if let Some(err) = sink_error {
            // Nowhere to write a record: say it on stderr.
            tracing::error!("cli: {err}");
            pitcrew_core::say!("cli: {err}");
            return exit(SUPERVISOR_FAILED);
        }
        let manifest = std::fs::read(&manifest_path)
            .map_err(|e| format!("manifest-invalid: {}: {e}", manifest_path.display()))
            .and_then(|bytes| {
                Manifest::from_json(&bytes).map_err(|e| format!("manifest-invalid: {e}"))
            });
        let record = match manifest {
            Ok(manifest) => run_iteration(
                &mut ctx,
                &manifest,
                &manifest.runtime_dirs(),
                args.iteration,
                &mut NoopObserver,
            ),
            Err(reason) => {
                tracing::error!("{reason}");
                let mut record = IterationResult::new(args.iteration, ctx.info.clone());
                record.finish(SUPERVISOR_FAILED, Some(reason));
                record
            }
        };
        if let Some(reason) = &record.reason {
            tracing::info!(
                "iteration {}: exit {} ({reason})",
                record.iteration,
                record.exit_code
            );
        }
        write_record(sink, &record);
        exit(record.exit_code)
    }

    /// `pitcrew-init serve` (and no subcommand).
    pub fn serve(
        args: &ServeArgs,
        verbose: u8,
        baseline: BaselineEnv,
        heap_note: Option<std::io::Error>,
    ) -> ExitCode {
        // As PID 1 the supervisor changes to "/": make relative paths absolute first.
        let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let opts = pitcrew_core::server::ServeOptions {
            socket: absolute(&args.socket),
            records: absolute(&args.records),
            stdio: args.stdio,
            limits: pitcrew_core::unpack::UnpackLimits {
                max_entries: args.upload_max_entries,
                max_bytes: args.upload_max_bytes,
                private: false,
                part: None,
            },
        };
        // Signals first: no thread may ever see an unblocked signal.
        let signals = Signals::install();
        let _ = PANIC_TARGET.set(PanicTarget {
            pid: std::process::id(),
            iteration: 0,
            file: None,
            fd: None,
        });
        install_panic_hook();
        pitcrew_core::logging::init(verbose, false);
        log_heap_note(heap_note);
        let signals = match signals {
            Ok(signals) => signals,
            Err(err) => {
                pitcrew_core::say!("signal setup: {err}");
                return exit(SUPERVISOR_FAILED);
            }
        };
        let mut ctx = Supervisor::start(baseline, signals, args.agent_cgroup);
        // A fresh network namespace (the local engine's) starts with `lo` down: even loopback
        // would be unreachable. Elsewhere it is up already, or not ours to change.
        if let Err(err) = pitcrew_core::sandbox::netns::bring_up_loopback() {
            tracing::warn!("network: cannot bring lo up: {err}");
        }
        if args.private_run {
            if !ctx.info.pid1 {
                pitcrew_core::say!(
                    "--private-run needs PID 1 of a PID namespace (with its own mount \
                     namespace); refusing to hide the host's /run"
                );
                return exit(SUPERVISOR_FAILED);
            }
            let keep = [opts.socket.as_path(), opts.records.as_path()];
            match pitcrew_core::sandbox::private_run::hide(&keep) {
                Ok(hidden) => ctx.hidden_run = hidden,
                Err(err) => {
                    pitcrew_core::say!("{err}");
                    return exit(SUPERVISOR_FAILED);
                }
            }
        }
        if args.private_ipc {
            if !ctx.info.pid1 {
                pitcrew_core::say!(
                    "--private-ipc needs PID 1 of a PID namespace (with its own \
                     mount namespace); refusing to unmount the host's /dev/shm"
                );
                return exit(SUPERVISOR_FAILED);
            }
            if let Err(err) = pitcrew_core::sandbox::private_ipc::renew() {
                pitcrew_core::say!("{err}");
                return exit(SUPERVISOR_FAILED);
            }
            ctx.ipc_reset = IpcReset::Renew;
        } else if args.unprivileged {
            if let Err(err) = ctx.enter_unprivileged() {
                pitcrew_core::say!("{err}");
                return exit(SUPERVISOR_FAILED);
            }
        } else if ctx.info.pid1 {
            // A container's entrypoint: its IPC namespace and /dev/shm are its own (engines
            // give every container its own) and outlive each iteration.
            ctx.ipc_reset = IpcReset::Sweep;
        }
        exit(pitcrew_core::server::serve(ctx, opts))
    }

    fn fail_early(sink: Sink, iteration: u32, reason: String) -> ExitCode {
        tracing::error!("{reason}");
        let pid1 = std::process::id() == 1;
        let mut record = IterationResult::new(
            iteration,
            SupervisorInfo {
                pid1,
                mode: if pid1 {
                    SupervisorMode::Pid1
                } else {
                    SupervisorMode::Degraded
                },
                degraded_reason: None,
            },
        );
        record.finish(SUPERVISOR_FAILED, Some(reason));
        write_record(sink, &record);
        exit(SUPERVISOR_FAILED)
    }
}
