//! One iteration, in order: reap → prepare → verify → context files → environment → confine
//! and launch → wait → reap again and judge, producing the result record.
//!
//! This is the only place that knows the order, and [`run_steps`] is nothing but the steps:
//! each is a function of its own that either hands the next one what it needs or stops the
//! iteration with a [`Stop`] (its exit code and reason). `pitcrew-init run` calls
//! [`run_iteration`] once; the long-lived mode calls it once per iteration with the same
//! [`Supervisor`].

use crate::clock::millis;
use crate::environment::EnvOutcome;
use crate::exit_code::{self, signal_name};
use crate::judge::judge;
use crate::manifest::{Manifest, RuntimeDirPaths};
use crate::protocol::events::{self as ev, EventDetail, Step, StepState};
use crate::result::{AgentRecord, IterationResult, OutputRecord};
use crate::sandbox::capture::{OutputCapture, StreamName, StreamReport};
use crate::sandbox::cgroup::IterationCgroups;
use crate::sandbox::confine::ConfinePlan;
use crate::sandbox::disk_budget::DiskWatch;
use crate::sandbox::launch::{launch, LaunchSpec};
use crate::sandbox::reap::{reap_everything, reap_everything_unless, ReapOutcome};
use crate::sandbox::wait::{wait_for_agent, AgentOutcome};
use crate::{environment, runtime_argv, verify};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use StepState::{Finished, Started};

pub use crate::sandbox::observer::{IterationObserver, NoopObserver, ObserverAction};
pub use crate::sandbox::state::{BaselineEnv, Supervisor};

/// Why an iteration ended at a step instead of with the agent's own verdict: the record's exit
/// code and reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    /// The iteration's exit code.
    pub code: i32,
    /// The record's reason.
    pub reason: String,
}

impl Stop {
    /// A step of the supervisor's own failed (125).
    fn supervisor(reason: impl Into<String>) -> Stop {
        Stop {
            code: exit_code::SUPERVISOR_FAILED,
            reason: reason.into(),
        }
    }
}

/// How the agent's run ended, for the record.
struct Verdict {
    code: i32,
    reason: Option<String>,
}

/// What verification resolved for the launch.
struct Verified {
    /// The agent program.
    binary: PathBuf,
    /// The interpreter of a `#!/usr/bin/env NAME` agent, resolved on the baseline `PATH`.
    interpreter: Option<PathBuf>,
    /// The runtime's release, when its package says.
    version: Option<String>,
    /// Claude Code: the workdir's `CLAUDE.md` to give it (the context step).
    claude_md: Option<String>,
    /// Claude Code: the settings derived from the pinned `claude-settings` file.
    claude_settings: Option<String>,
}

/// The agent while it runs, and what must outlive it until the verdict.
struct Running {
    pid: i32,
    spec: LaunchSpec,
    /// The argv as the record shows it, and the prompt it carried.
    argv: (Vec<String>, Option<crate::result::PromptRecord>),
    capture: OutputCapture,
    /// Removed (when dropped) after the final reap.
    cgroups: IterationCgroups,
    /// The disk budget, when the manifest sets one.
    disk: Option<DiskWatch>,
}

/// The detail of a step that failed for `reason`.
fn failed(reason: &str) -> EventDetail {
    EventDetail::of(&ev::Failed {
        error: reason.to_string(),
        exit_code: None,
    })
}

/// The detail of a reap that ended with `outcome`.
fn reaped(outcome: &ReapOutcome) -> EventDetail {
    EventDetail::of(&ev::Reaped {
        killed: outcome.killed,
        remaining: outcome.remaining,
    })
}

fn reap(ctx: &mut Supervisor, manifest: &Manifest) -> ReapOutcome {
    reap_everything(
        ctx,
        Duration::from_millis(manifest.limits.kill_grace_ms),
        Duration::from_millis(manifest.limits.reap_budget_ms),
    )
}

/// Runs one whole iteration and returns its record (whose `exit_code` is the iteration's),
/// reporting each step to `observer`. `dirs` is `manifest`'s [`Manifest::runtime_dirs`],
/// resolved once by the caller for the whole iteration (the serve mode's record step copies
/// the transcripts from them too).
pub fn run_iteration(
    ctx: &mut Supervisor,
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
    iteration: u32,
    observer: &mut dyn IterationObserver,
) -> IterationResult {
    let mut record = IterationResult::new(iteration, ctx.info.clone());
    record.env.baseline_non_utf8 = ctx.baseline.non_utf8.clone();
    // The policy, with no connection: the long-lived mode replaces it with what its listeners
    // saw; `pitcrew-init run` opens none (no host to carry them).
    record.network = manifest
        .network
        .as_ref()
        .map(|policy| crate::result::NetworkRecord {
            mode: policy.mode_name().to_string(),
            platform: match policy {
                crate::manifest::NetworkPolicy::Platform { platform } => Some(platform.clone()),
                _ => None,
            },
            allow: policy.allowed().iter().map(ToString::to_string).collect(),
            hidden: ctx.hidden_run.clone(),
            ..Default::default()
        });
    match run_steps(ctx, manifest, dirs, iteration, observer, &mut record) {
        Ok(verdict) => record.finish(verdict.code, verdict.reason),
        Err(stop) => record.finish(stop.code, Some(stop.reason)),
    }
    record
}

/// The steps in order; each fills in its part of `record`.
fn run_steps(
    ctx: &mut Supervisor,
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
    iteration: u32,
    observer: &mut dyn IterationObserver,
    record: &mut IterationResult,
) -> Result<Verdict, Stop> {
    // 1. Reap: nothing but the supervisor may run while we verify.
    reap_before(ctx, manifest, dirs, record, observer)?;
    // 1a. The observer's listeners (egress), opened once nothing of an earlier agent runs.
    observer.after_reap(manifest).map_err(Stop::supervisor)?;
    // 1b. Prepare: private IPC, the agent's directories, the config dir reset.
    prepare(ctx, manifest, dirs, record, observer)?;
    // 2. Verify.
    let mut verified = verify_step(ctx, manifest, record, observer)?;
    // 2b. Claude Code's skill plugins, from the verified skills trees.
    claude_skills_step(manifest, dirs, observer)?;
    // 2b''. Codex's verified plugins, copied from the verified trees, and the config.toml
    // enabling exactly them.
    codex_plugins_step(manifest, dirs, record)?;
    // 2b'. Claude Code's --settings, from the verified claude-settings file.
    verified.claude_settings = claude_settings_step(manifest, observer)?;
    // 2c. The context files: set back to the run's baseline where asked, and named.
    verified.claude_md = context_step(manifest, dirs, &verified, iteration, record, observer)?;
    // 2d. What the runtime will read from the workspace unverified, with no flag to stop it
    // (after the context step, which may have set some of it back).
    workspace_config_step(manifest, &verified, record, observer);
    // 3. Environment.
    let env = environment_step(ctx, manifest, dirs, &verified, record, observer)?;
    refuse_if_cancelled(ctx, observer)?;
    // 4 and 5. Confine and launch.
    let mut running = launch_step(
        ctx, manifest, dirs, iteration, &verified, &env, record, observer,
    )?;
    // 6. Supervise.
    observer.step(
        Step::Agent,
        Started,
        EventDetail::of(&ev::Pid { pid: running.pid }),
    );
    let started = Instant::now();
    let outcome = wait_for_agent(
        ctx,
        running.pid,
        &manifest.limits,
        &mut running.capture,
        observer,
        running.disk.as_mut(),
    );
    record.steps.agent_ms = millis(started.elapsed());
    // 7. Reap again, then judge.
    Ok(conclude(
        ctx, manifest, dirs, running, &outcome, record, observer,
    ))
}

/// Step 1: kill and reap every process but the supervisor.
fn reap_before(
    ctx: &mut Supervisor,
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
    record: &mut IterationResult,
    observer: &mut dyn IterationObserver,
) -> Result<(), Stop> {
    observer.step(Step::Reap, Started, EventDetail::empty());
    let outcome = reap(ctx, manifest);
    record.steps.reap_ms = millis(outcome.elapsed);
    record.reaped.before = outcome.killed;
    observer.step(Step::Reap, Finished, reaped(&outcome));
    restore_own_state(ctx, manifest, dirs, record, observer)?;
    if outcome.remaining > 0 {
        return Err(Stop::supervisor(format!(
            "reap-incomplete: {} process(es) survived {} ms of TERM/KILL",
            outcome.remaining, manifest.limits.reap_budget_ms
        )));
    }
    Ok(())
}

/// Step 1b, once nothing of an earlier agent runs: a fresh IPC namespace where asked, the
/// agent's directories (workdir and runtime directories: present, the agent's, no link on the
/// way), the config dir back to what the host pinned (for Claude Code, its user settings file
/// then made root's: [`crate::claude_user_settings`]), `HOME` and `TMPDIR` emptied.
fn prepare(
    ctx: &mut Supervisor,
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
    record: &mut IterationResult,
    observer: &mut dyn IterationObserver,
) -> Result<(), Stop> {
    use crate::sandbox::private_ipc::{self, IpcReset};
    match ctx.ipc_reset {
        IpcReset::None => {}
        IpcReset::Renew => private_ipc::renew().map_err(Stop::supervisor)?,
        IpcReset::Sweep => {
            let swept = private_ipc::sweep(manifest.user.uid).map_err(Stop::supervisor)?;
            if swept != crate::result::IpcSweepRecord::default() {
                observer.step(Step::IpcSweep, Finished, EventDetail::of(&swept));
                record.ipc_sweep = Some(swept);
            }
        }
    }
    // Before anything is made for the agent: ids this user namespace does not map.
    if let Some(reason) = crate::user_namespace::current()
        .and_then(|ns| ns.unmapped(manifest.user.uid, manifest.user.gid, &manifest.user.groups))
    {
        return Err(Stop::supervisor(format!("confine: {reason}")));
    }
    agent_dirs_step(manifest, dirs, observer)?;
    let reset = crate::dir_reset::reset_config(manifest, dirs)
        .map_err(|err| Stop::supervisor(format!("config-reset: {err}")))?;
    if reset.count > 0 {
        let reset = crate::result::ResetRecord {
            removed: reset.count,
            paths: reset.removed,
        };
        observer.step(Step::ConfigReset, Finished, EventDetail::of(&reset));
        record.config_reset = Some(reset);
    }
    // With the config dir back to the pinned files: every name Claude Code would load from it
    // made root's, the agent unable to create one it would load mid-iteration.
    record.claude_config = crate::claude_user_settings::protect(manifest, dirs)
        .map_err(|err| Stop::supervisor(format!("claude-config: {err}")))?;
    // pi's the same way (pi reads auth.json there again while it runs).
    record.pi_config = crate::pi_config::protect(manifest, dirs)
        .map_err(|err| Stop::supervisor(format!("pi-config: {err}")))?;
    // Codex's too (a sub-agent reads hooks.json and AGENTS.md there again when spawned).
    record.codex_config = crate::codex_config::protect(manifest, dirs)
        .map_err(|err| Stop::supervisor(format!("codex-config: {err}")))?;
    // The image's /etc/codex, which Codex reads whatever its flags: named, as Claude Code's is.
    if manifest.runtime == crate::manifest::Runtime::Codex {
        let managed = crate::claude_managed::list(Path::new(crate::codex_config::MANAGED_DIR));
        if !managed.is_empty() {
            record
                .codex_config
                .get_or_insert_with(Default::default)
                .managed = managed;
        }
    }
    let scratch = crate::dir_reset::reset_home_and_tmp(manifest, dirs, &ctx.supervisor_paths)
        .map_err(|err| Stop::supervisor(format!("home-reset: {err}")))?;
    // pi's built-in provider pointed at the model listener (its key stays on the host).
    crate::pi_model_route::write(manifest, dirs, observer.model_listener_url().as_deref())
        .map_err(|err| Stop::supervisor(format!("model-route: {err}")))?;
    // With HOME emptied: Node's global module folders there made root's empty directories.
    record.home_guarded = crate::home_guard::protect(manifest, dirs)
        .map_err(|err| Stop::supervisor(format!("home-guard: {err}")))?;
    // OpenCode's verified plugin modules, linked into its config dir.
    let plugins = crate::opencode_config::deliver_plugins(manifest, dirs)
        .map_err(|err| Stop::supervisor(format!("opencode-plugins: {err}")))?;
    if !plugins.is_empty() {
        record
            .opencode_config
            .get_or_insert_with(Default::default)
            .plugins = plugins;
    }
    // OpenCode's config dir and the other config dirs it would load from, root's.
    if let Some(guarded) = crate::opencode_config::protect(manifest, dirs)
        .map_err(|err| Stop::supervisor(format!("opencode-config: {err}")))?
    {
        record
            .opencode_config
            .get_or_insert_with(Default::default)
            .guarded = guarded;
    }
    let output = crate::dir_reset::empty_output(manifest)
        .map_err(|err| Stop::supervisor(format!("output-reset: {err}")))?;
    for (step, report, field) in [
        (Step::HomeReset, scratch.home, &mut record.home_reset),
        (Step::TmpReset, scratch.tmp, &mut record.tmp_reset),
        (Step::OutputReset, output, &mut record.output_reset),
    ] {
        if report.count > 0 {
            let reset = crate::result::ResetRecord {
                removed: report.count,
                paths: report.removed,
            };
            observer.step(step, Finished, EventDetail::of(&reset));
            *field = Some(reset);
        }
    }
    Ok(())
}

/// The agent's directories, made (or a non-directory in their place replaced) without
/// following a link, once nothing of an earlier agent runs.
fn agent_dirs_step(
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
    observer: &mut dyn IterationObserver,
) -> Result<(), Stop> {
    observer.step(Step::AgentDirs, Started, EventDetail::empty());
    match crate::agent_dirs::prepare(manifest, dirs) {
        Ok(replaced) => {
            for r in &replaced {
                tracing::warn!(
                    "agent-dirs: {} was a {}, replaced by a directory",
                    r.path,
                    r.was
                );
            }
            observer.step(
                Step::AgentDirs,
                Finished,
                EventDetail::of(&ev::AgentDirs { replaced }),
            );
            Ok(())
        }
        Err(err) => {
            let reason = format!("agent-dirs: {err}");
            observer.step(Step::AgentDirs, Finished, failed(&reason));
            Err(Stop::supervisor(reason))
        }
    }
}

/// Step 2: every tree, pinned file and the agent binary against the manifest.
fn verify_step(
    ctx: &mut Supervisor,
    manifest: &Manifest,
    record: &mut IterationResult,
    observer: &mut dyn IterationObserver,
) -> Result<Verified, Stop> {
    observer.step(Step::Verify, Started, EventDetail::empty());
    let started = Instant::now();
    let report = verify::verify(manifest, ctx.baseline.path());
    record.steps.verify_ms = millis(started.elapsed());
    let failure = report.failure();
    let binary = report.resolved_agent().map(Path::to_path_buf);
    let interpreter = report.agent.interpreter.clone().map(PathBuf::from);
    let version = report.agent.version.clone();
    record.verification = Some(report);
    let verified = ev::Verified {
        exit_code: failure.as_ref().map(|f| f.exit_code),
        ok: failure.is_none(),
        reason: failure.as_ref().map(|f| f.reason.clone()),
    };
    observer.step(Step::Verify, Finished, EventDetail::of(&verified));
    if let Some(failure) = failure {
        return Err(Stop {
            code: failure.exit_code,
            reason: failure.reason,
        });
    }
    // A clean report always has a resolved agent; anything else is a supervisor bug.
    let binary = binary.ok_or_else(|| {
        Stop::supervisor("internal: verification passed without a resolved agent binary")
    })?;

    Ok(Verified {
        binary,
        interpreter,
        version,
        claude_md: None,
        claude_settings: None,
    })
}

/// Step 2b, for Claude Code: the plugin directory of each skills tree, holding only the skill's
/// `SKILL.md` derived from the verified bytes (`crate::claude_skills`), made again from scratch.
fn claude_skills_step(
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
    observer: &mut dyn IterationObserver,
) -> Result<(), Stop> {
    match crate::claude_skills::prepare(manifest, dirs) {
        Ok(plugins) if plugins.is_empty() => Ok(()),
        Ok(plugins) => {
            observer.step(
                Step::ClaudeSkills,
                Finished,
                EventDetail::of(&ev::ClaudeSkills { plugins }),
            );
            Ok(())
        }
        Err(err) => {
            let reason = format!("claude-skills: {err}");
            observer.step(Step::ClaudeSkills, Finished, failed(&reason));
            Err(Stop::supervisor(reason))
        }
    }
}

/// Step 2b'', for Codex with verified plugins: each copied into Codex's plugin cache and
/// enabled by the supervisor's `config.toml` ([`crate::codex_config::deliver_plugins`]), named in
/// the record's `codex_config.plugins`.
fn codex_plugins_step(
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
    record: &mut IterationResult,
) -> Result<(), Stop> {
    let plugins = crate::codex_config::deliver_plugins(manifest, dirs)
        .map_err(|err| Stop::supervisor(format!("codex-plugins: {err}")))?;
    if !plugins.is_empty() {
        record
            .codex_config
            .get_or_insert_with(Default::default)
            .plugins = plugins;
    }
    Ok(())
}

/// Step 2b', for Claude Code with a pinned `claude-settings` file: the `--settings` it is
/// given, derived from the file's verified bytes (`crate::claude_settings`): hooks kept on
/// whatever user settings the agent writes, built-in plugins off unless the file names them.
fn claude_settings_step(
    manifest: &Manifest,
    observer: &mut dyn IterationObserver,
) -> Result<Option<String>, Stop> {
    let Some(pin) = crate::claude_settings::pinned(manifest) else {
        return Ok(None);
    };
    match crate::claude_settings::read_and_derive(pin) {
        Ok(settings) => {
            observer.step(
                Step::ClaudeSettings,
                Finished,
                EventDetail::of(&ev::ClaudeSettings {
                    file: pin.path.clone(),
                }),
            );
            Ok(Some(settings))
        }
        Err(err) => {
            let reason = format!("claude-settings: {err}");
            observer.step(Step::ClaudeSettings, Finished, failed(&reason));
            Err(Stop::supervisor(reason))
        }
    }
}

/// Step 2d: the workspace configuration the runtime reads unverified and no flag of pitcrew's
/// switches off, named in the record and an event.
fn workspace_config_step(
    manifest: &Manifest,
    verified: &Verified,
    record: &mut IterationResult,
    observer: &mut dyn IterationObserver,
) {
    record.workspace_config =
        crate::workspace_config::present(manifest, verified.version.as_deref());
    if !record.workspace_config.is_empty() {
        let unverified = record.workspace_config.clone();
        observer.step(
            Step::WorkspaceConfig,
            Finished,
            EventDetail::of(&ev::WorkspaceConfig { unverified }),
        );
    }
}

/// Step 2c, with nothing but the supervisor running: the context files the runtime will read
/// (`agent.context_files`), for `uploaded` first set back to the run's baseline (kept by the
/// observer, or taken now), named in the record. Returns the workdir's `CLAUDE.md` to give
/// Claude Code.
fn context_step(
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
    verified: &Verified,
    iteration: u32,
    record: &mut IterationResult,
    observer: &mut dyn IterationObserver,
) -> Result<Option<String>, Stop> {
    let version = verified.version.as_deref();
    let prepared = crate::context_files::prepare(
        manifest,
        dirs,
        version,
        iteration,
        observer.context_baseline(),
    );
    match prepared {
        Ok(None) => Ok(None),
        Ok(Some(prepared)) => {
            observer.step(
                Step::ContextFiles,
                Finished,
                EventDetail::of(&prepared.record),
            );
            record.context_files = Some(prepared.record);
            Ok(prepared.claude_md)
        }
        Err(err) => {
            let reason = format!("context-files: {err}");
            observer.step(Step::ContextFiles, Finished, failed(&reason));
            Err(Stop::supervisor(reason))
        }
    }
}

/// Step 3: the agent's environment, built from scratch.
fn environment_step(
    ctx: &mut Supervisor,
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
    verified: &Verified,
    record: &mut IterationResult,
    observer: &mut dyn IterationObserver,
) -> Result<EnvOutcome, Stop> {
    observer.step(Step::Environment, Started, EventDetail::empty());
    let started = Instant::now();
    let env = environment::build_with(manifest, dirs, &ctx.baseline.vars, &observer.network_pins());
    record.steps.env_ms = millis(started.elapsed());
    let mut env = env.map_err(|err| {
        observer.step(Step::Environment, Finished, failed(&err.to_string()));
        Stop::supervisor(err.to_string())
    })?;
    // OpenCode's configuration, from that environment (its model endpoint).
    if let Err(reason) = opencode_config(manifest, verified, &mut env, record) {
        observer.step(Step::Environment, Finished, failed(&reason));
        return Err(Stop::supervisor(reason));
    }
    record.env.removed = env.removed.clone();
    record.env.dotenv_refused = env.dotenv_refused.clone();
    record.env.path_dropped = env.path_dropped.clone();
    record.env.layers = env
        .layers
        .iter()
        .map(|(name, layer)| (name.clone(), layer.to_string()))
        .collect();
    let counts = ev::Environment {
        dotenv_refused: record.env.dotenv_refused.len() as u64,
        removed: record.env.removed.len() as u64,
    };
    observer.step(Step::Environment, Finished, EventDetail::of(&counts));
    Ok(env)
}

/// For OpenCode: its whole configuration written into `OPENCODE_CONFIG_CONTENT`
/// ([`crate::opencode_config::config`]), from the agent's environment (its model endpoint), a
/// pin of the supervisor's, and named in the record (the key hidden). `Err` says why not.
fn opencode_config(
    manifest: &Manifest,
    verified: &Verified,
    env: &mut EnvOutcome,
    record: &mut IterationResult,
) -> Result<(), String> {
    if manifest.runtime != crate::manifest::Runtime::Opencode {
        return Ok(());
    }
    let agents_md = verified
        .claude_md
        .as_deref()
        .filter(|_| crate::opencode_config::passes_agents_md(manifest));
    let config = crate::opencode_config::config(manifest, &env.env, agents_md)
        .map_err(|err| format!("opencode-config: {err}"))?;
    let name = crate::opencode_config::CONTENT_VAR.to_string();
    env.env.retain(|(n, _)| *n != name);
    env.env.push((name.clone(), config.to_string()));
    env.env.sort();
    env.layers
        .insert(name.clone(), crate::environment::EnvSource::Pin);
    record.env.layers.insert(name, "pin".to_string());
    let opencode = record.opencode_config.get_or_insert_with(Default::default);
    opencode.content = Some(crate::opencode_config::shown(config));
    // The image's managed configuration, merged over pitcrew's: named, as Claude Code's is.
    opencode.managed =
        crate::claude_managed::list(std::path::Path::new(crate::opencode_config::MANAGED_DIR));
    Ok(())
}

/// A cancel that arrived while reaping or verifying: nothing is launched.
fn refuse_if_cancelled(
    ctx: &mut Supervisor,
    observer: &mut dyn IterationObserver,
) -> Result<(), Stop> {
    match observer.on_ready(ctx).into_iter().find_map(|a| match a {
        ObserverAction::Cancel(why) => Some(why),
        ObserverAction::Signal(_) => None,
    }) {
        Some(why) => Err(Stop {
            code: 128 + libc::SIGTERM,
            reason: format!("cancelled: {why} (before launch)"),
        }),
        None => Ok(()),
    }
}

/// Steps 4 and 5: the agent's cgroups, confinement, argv and streams prepared in the
/// supervisor, then fork, confine and exec. A failed launch is reaped before it stops the
/// iteration.
#[allow(clippy::too_many_arguments)]
fn launch_step(
    ctx: &mut Supervisor,
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
    iteration: u32,
    verified: &Verified,
    env: &EnvOutcome,
    record: &mut IterationResult,
    observer: &mut dyn IterationObserver,
) -> Result<Running, Stop> {
    observer.step(Step::Launch, Started, EventDetail::empty());
    crate::sandbox::heap::release_freed_memory();
    let started = Instant::now();
    let refused = |observer: &mut dyn IterationObserver, reason: String| {
        observer.step(Step::Launch, Finished, failed(&reason));
        Stop::supervisor(reason)
    };
    // `network: none` or `allow` needs a namespace with loopback only: the sandbox's, or one of
    // the agent's own; refused before the fork when neither can be had.
    let netns = agent_network(manifest, &env.env, observer).map_err(|r| refused(observer, r))?;
    if let Some(network) = &mut record.network {
        let placed = match &netns {
            Some(_) => crate::sandbox::netns::IN_AGENT,
            None => crate::sandbox::netns::IN_SANDBOX,
        };
        network.namespace = Some(placed.to_string());
        network.namespace_via = netns.as_ref().map(|ns| ns.via().to_string());
    }
    // Only a pi `--tools` list needs them (the scan reads the verified trees).
    let extension_tools = match (manifest.runtime, &manifest.agent.tools) {
        (crate::manifest::Runtime::Pi, Some(tools)) if !tools.is_empty() => {
            runtime_argv::extension_tools(manifest)
                .map_err(|reason| refused(observer, format!("argv: extension tools: {reason}")))?
        }
        _ => Vec::new(),
    };
    let argv = runtime_argv::argv(
        manifest,
        dirs,
        &verified.binary,
        verified.version.as_deref(),
        &env.env,
        verified.claude_md.as_deref(),
        verified.claude_settings.as_deref(),
        &extension_tools,
    )
    .map_err(|err| refused(observer, format!("argv: {err}")))?;
    if manifest.runtime == crate::manifest::Runtime::Codex {
        let etc = std::path::Path::new("/etc");
        if let Some(reason) = crate::codex_system::system_config_problem(&manifest.user, etc) {
            return Err(refused(observer, reason));
        }
    }
    // OpenCode's managed configuration (`/etc/opencode`), merged over pitcrew's own.
    if manifest.runtime == crate::manifest::Runtime::Opencode {
        let etc = std::path::Path::new("/etc");
        if let Some(reason) = crate::codex_system::opencode_system_problem(&manifest.user, etc) {
            return Err(refused(observer, reason));
        }
    }
    // The agent tree's own cgroups, where the supervisor may make them (removed on drop).
    let cgroups = ctx
        .agent_cgroups
        .create(
            iteration,
            manifest.limits.memory_bytes,
            manifest.limits.processes,
        )
        .map_err(|reason| refused(observer, format!("limits: {reason}")))?;
    let landlock = crate::sandbox::confine::landlock_plan(
        manifest,
        dirs,
        ctx.info.mode,
        &ctx.supervisor_paths,
    )
    .map_err(|reason| refused(observer, reason))?;
    let mut plan = ConfinePlan::prepare(
        manifest,
        dirs,
        &landlock,
        *ctx.signals.original_mask(),
        &ctx.agent_cgroups,
        &cgroups,
    )
    .map_err(|reason| refused(observer, reason))?;
    // A `#!/usr/bin/env NAME` agent runs through the interpreter verify resolved on the
    // baseline PATH: `NAME script args…`, what env would have run, minus the PATH lookup.
    let (program, argv) = match &verified.interpreter {
        Some(interpreter) => {
            let mut full = vec![interpreter.display().to_string()];
            full.extend(argv);
            (interpreter.clone(), full)
        }
        None => (verified.binary.clone(), argv),
    };
    let shown_argv = runtime_argv::recorded(manifest, &argv);
    let (mut spec, mut capture) = LaunchSpec::prepare(&program, &argv, &env.env, &manifest.output)
        .map_err(|reason| refused(observer, format!("launch: {reason}")))?;
    // The disk budget's first sample: the used space the agent's writes are measured from.
    // Its output is written to the records' disk: each stream keeps no more than the budget.
    if let Some(budget) = manifest.limits.disk_bytes {
        capture.limit_to(budget);
    }
    let disk = match manifest.limits.disk_bytes {
        Some(limit) => Some(
            DiskWatch::start(
                limit,
                &crate::sandbox::confine::writable_roots(manifest, dirs),
            )
            .map_err(|reason| refused(observer, reason))?,
        ),
        None => None,
    };
    if let Some(ns) = netns {
        plan.join_network(ns);
        // A sandbox that shares the host's filesystem and was not started with its own
        // network hid no /run: the agent's child hides it for itself.
        if ctx.hidden_run.is_empty() {
            let run = agent_run(manifest, dirs).map_err(|reason| refused(observer, reason))?;
            if let Some(network) = &mut record.network {
                network.hidden = run.names().to_vec();
            }
            plan.hide_run(run);
        }
    }
    let launched = launch(&mut spec, &mut plan, &mut ctx.reaper);
    record.steps.confine_launch_ms = millis(started.elapsed());
    let mut confinement = plan.record.clone();
    drop(plan);
    let launched = match launched {
        Ok(launched) => launched,
        Err(err) => {
            tracing::warn!("launch: {}", err.reason());
            let failure = ev::Failed {
                error: err.reason().to_string(),
                exit_code: Some(err.exit_code()),
            };
            observer.step(Step::Launch, Finished, EventDetail::of(&failure));
            record.confinement = Some(confinement);
            ctx.reaper.unwatch();
            final_reap(ctx, manifest, dirs, record, observer, None);
            capture.finish();
            return Err(Stop {
                code: err.exit_code(),
                reason: err.reason(),
            });
        }
    };
    confinement.no_new_privs = launched.report.no_new_privs;
    confinement.caps_cleared = launched.report.caps_cleared;
    confinement.landlock.status = launched.report.landlock;
    confinement.seccomp.installed = launched.report.seccomp;
    record.confinement = Some(confinement);
    observer.step(
        Step::Launch,
        Finished,
        EventDetail::of(&ev::Pid { pid: launched.pid }),
    );
    Ok(Running {
        pid: launched.pid,
        spec,
        argv: shown_argv,
        capture,
        cgroups,
        disk,
    })
}

/// The network namespace the agent joins before exec, if not the sandbox's: under `none` or
/// `allow` in a sandbox whose namespace has an interface besides `lo`, the agent's own (the
/// observer's, whose listeners are bound in it, or one made here). `Err` is why the iteration
/// cannot start: the interfaces could not be listed, the agent's namespace could not be made,
/// or a `platform` policy's proxy is missing.
/// `/run` hidden for the agent alone ([`crate::sandbox::private_run::AgentRun`]), unless a path
/// it needs lies there.
fn agent_run(
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
) -> Result<crate::sandbox::private_run::AgentRun, String> {
    let needed: Vec<&Path> = std::iter::once(manifest.workdir.as_str())
        .chain(dirs.agent_dirs())
        .chain(manifest.trees.iter().map(|t| t.path.as_str()))
        .chain(manifest.files.iter().map(|f| f.path.as_str()))
        .map(Path::new)
        .collect();
    crate::sandbox::private_run::AgentRun::prepare(&needed)
}

fn agent_network(
    manifest: &Manifest,
    env: &[(String, String)],
    observer: &dyn IterationObserver,
) -> Result<Option<crate::sandbox::netns::AgentNamespace>, String> {
    use crate::sandbox::netns;
    let policy = manifest.network.as_ref();
    if let Some(reason) = netns::platform_refusal(policy, env) {
        return Err(reason);
    }
    let found = match (netns::interfaces(), policy) {
        (Ok(found), _) => found,
        (Err(err), Some(policy)) if !policy.unenforced() => {
            return Err(format!(
                "network: cannot list the sandbox's network interfaces (/proc/self/net/dev: \
                 {err}), so `network: {}` cannot be enforced; say `network: open` to run anyway",
                policy.mode_name()
            ))
        }
        (Err(_), _) => return Ok(None),
    };
    if !netns::needs_agent_namespace(policy, &found) {
        return Ok(None);
    }
    let made = match observer.agent_namespace() {
        Some(ns) => ns
            .try_clone()
            .map_err(|e| format!("the agent's network namespace: dup: {e}")),
        None => netns::AgentNamespace::create(&manifest.user, |_| ()).map(|(ns, ())| ns),
    };
    match made {
        Ok(ns) => Ok(Some(ns)),
        Err(unmade) => Err(netns::refusal(policy, &found, &unmade).unwrap_or(unmade)),
    }
}

/// The reap after the agent (or after a failed launch): records it, never changes the code.
/// With a disk budget it keeps sampling, and kills without a grace period once the budget is
/// passed (a writer that left the agent's group and ignores TERM would fill the disk during it).
fn final_reap(
    ctx: &mut Supervisor,
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
    record: &mut IterationResult,
    observer: &mut dyn IterationObserver,
    disk: Option<&mut DiskWatch>,
) {
    observer.step(Step::FinalReap, Started, EventDetail::empty());
    let outcome = match disk {
        Some(watch) => reap_everything_unless(
            ctx,
            Duration::from_millis(manifest.limits.kill_grace_ms),
            Duration::from_millis(manifest.limits.reap_budget_ms),
            &mut || watch.passed_while_reaping(),
        ),
        None => reap(ctx, manifest),
    };
    record.steps.final_reap_ms = millis(outcome.elapsed);
    record.reaped.after = outcome.killed;
    record.reaped.remaining_after = outcome.remaining;
    observer.step(Step::FinalReap, Finished, reaped(&outcome));
    // The record is written next: with the limits and directory modes it needs.
    if let Err(stop) = restore_own_state(ctx, manifest, dirs, record, observer) {
        tracing::warn!("{}", stop.reason);
    }
}

/// After a reap, once nothing of an agent runs: the supervisor's own limits and the modes of
/// the directories of its uid on its paths set back (in the record's `supervisor_restored` when
/// anything had changed), and, in the unprivileged mode, the manifest's paths held too.
fn restore_own_state(
    ctx: &mut Supervisor,
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
    record: &mut IterationResult,
    observer: &mut dyn IterationObserver,
) -> Result<(), Stop> {
    let Some(found) = ctx.restore_own_state() else {
        return hold_manifest_paths(ctx, manifest, dirs);
    };
    observer.step(Step::OwnState, StepState::Restored, EventDetail::of(&found));
    let all = record
        .supervisor_restored
        .get_or_insert_with(Default::default);
    all.limits.extend(found.limits);
    all.limits_lowered.extend(found.limits_lowered);
    all.modes.extend(found.modes);
    all.modes_failed.extend(found.modes_failed);
    hold_manifest_paths(ctx, manifest, dirs)
}

/// Holds (unprivileged mode) the directories of the supervisor's uid on the way to every path
/// the manifest names for the agent or verifies (up to their parents); one it cannot hold stops
/// the iteration (125).
fn hold_manifest_paths(
    ctx: &mut Supervisor,
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
) -> Result<(), Stop> {
    if !ctx.owned_dirs.enabled() {
        return Ok(());
    }
    // The parents of what the agent writes and of what is verified; not what lies inside the
    // agent's own directories, which it may change at will (and `agent_dirs` repairs).
    let mut agent: Vec<&str> = vec![&manifest.workdir];
    agent.extend(dirs.agent_dirs());
    let named = agent
        .iter()
        .copied()
        .chain(manifest.trees.iter().map(|t| t.path.as_str()))
        .chain(manifest.files.iter().map(|f| f.path.as_str()));
    for path in named.filter_map(|p| Path::new(p).parent()) {
        if agent.iter().any(|a| path.starts_with(a)) {
            continue;
        }
        ctx.owned_dirs
            .guard(path)
            .map_err(|why| Stop::supervisor(format!("owned-dirs: {why}")))?;
    }
    Ok(())
}

/// Step 7: reap again, then judge. Nothing of the agent runs while the verdict is formed, and
/// the stream the judge reads is complete (every process that could write it is gone).
fn conclude(
    ctx: &mut Supervisor,
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
    running: Running,
    outcome: &AgentOutcome,
    record: &mut IterationResult,
    observer: &mut dyn IterationObserver,
) -> Verdict {
    let Running {
        pid,
        spec,
        argv: (argv, prompt),
        mut capture,
        cgroups,
        mut disk,
    } = running;
    let mut code = outcome.exit.code();
    let mut reason = outcome.timed_out.then(|| {
        format!(
            "timeout: the agent ran longer than {} ms",
            manifest.limits.timeout_ms
        )
    });
    if let Some(why) = &outcome.cancelled {
        reason = Some(format!("cancelled: {why}"));
        if outcome.exit.signal().is_none() {
            // The agent handled SIGTERM and exited by itself: still a cancelled iteration.
            code = 128 + libc::SIGTERM;
        }
    }
    let ended = ev::AgentEnded {
        cancelled: outcome.cancelled.is_some(),
        exit_code: outcome.exit.code(),
        signal: outcome.exit.signal().map(signal_name),
        timed_out: outcome.timed_out,
    };
    observer.step(Step::Agent, Finished, EventDetail::of(&ended));

    record.signal = outcome.exit.signal().map(signal_name);
    final_reap(ctx, manifest, dirs, record, observer, disk.as_mut());
    let usage = cgroups.usage();
    drop(cgroups);
    if let Some(confinement) = &mut record.confinement {
        let limits = &mut confinement.limits;
        limits.memory.peak = usage.memory_peak;
        limits.memory.oom_kills = usage.oom_kills;
        limits.processes.peak = usage.processes_peak;
        limits.processes.refused_forks = usage.refused_forks;
    }
    if reason.is_none() && code != 0 && usage.oom_kills.is_some_and(|n| n > 0) {
        reason = Some(format!(
            "memory-limit: the agent's tree reached limits.memory_bytes ({} bytes); the kernel \
             killed {} of its processes",
            manifest.limits.memory_bytes,
            usage.oom_kills.unwrap_or(0)
        ));
    }
    if let Some(mut watch) = disk {
        watch.finish();
        if let Some(why) = watch.reason() {
            if code == 0 {
                code = 1;
            }
            // First: a timeout or cancel during which the disk filled is the disk's doing.
            reason = Some(match reason {
                Some(earlier) => format!("{why}; {earlier}"),
                None => why,
            });
        }
        if let Some(confinement) = &mut record.confinement {
            confinement.limits.disk = Some(watch.record());
        }
    }
    let streams = capture.finish();
    record.agent = Some(AgentRecord {
        argv0: spec.argv0.clone(),
        argv,
        prompt,
        pid,
        timed_out: outcome.timed_out,
        forwarded_signals: outcome.forwarded.clone(),
        output: streams.iter().map(output_record).collect(),
    });
    if code == 0 && outcome.cancelled.is_none() {
        if let Some(verdict) = judge_stdout(manifest, &spec, &streams) {
            code = 1;
            reason = Some(verdict);
        }
    }
    // Whatever the outcome: a failed or timed-out iteration spent tokens too.
    record.usage = stdout_usage(manifest, &spec, &streams);
    Verdict { code, reason }
}

/// The tokens and cost the runtime (pi, Claude) reported in its captured stdout
/// ([`crate::usage`]): read from the record file once the stream has ended, like the judge's;
/// `None` when stdout is not captured to a file or was still held open after the final reap.
fn stdout_usage(
    manifest: &Manifest,
    spec: &LaunchSpec,
    streams: &[StreamReport],
) -> Option<crate::result::UsageRecord> {
    if manifest.runtime == crate::manifest::Runtime::Command {
        return None;
    }
    let file = spec.stdout_file()?;
    let held = streams
        .iter()
        .any(|s| s.name != StreamName::Stderr && !s.complete);
    if held {
        return None;
    }
    crate::usage::usage(manifest.runtime, file)
}

/// A captured stream as the record shows it.
fn output_record(report: &StreamReport) -> OutputRecord {
    OutputRecord {
        stream: match report.name {
            StreamName::Stdout => "stdout",
            StreamName::Stderr => "stderr",
            StreamName::Both => "both",
        }
        .to_string(),
        kept: report.kept,
        dropped: report.dropped,
        complete: report.complete,
        write_error: report.write_error.clone(),
    }
}

/// Runs the judge over the captured stdout (only possible when the manifest sends stdout to
/// a file). A stdout still held open after the final reap (a process outside the sandbox got
/// the agent's socket, or one survived the reap) could have been written after the runtime
/// ended: the iteration fails rather than be judged on it.
fn judge_stdout(
    manifest: &Manifest,
    spec: &LaunchSpec,
    streams: &[StreamReport],
) -> Option<String> {
    let Some(file) = spec.stdout_file() else {
        if manifest.runtime != crate::manifest::Runtime::Command {
            tracing::warn!("judge: stdout is not captured (output.stdout unset); not judged");
        }
        return None;
    };
    if manifest.runtime == crate::manifest::Runtime::Command {
        return None;
    }
    let held = streams
        .iter()
        .any(|s| s.name != StreamName::Stderr && !s.complete);
    if held {
        return Some(
            "judge: output-incomplete: the agent's stdout was still open after the final reap \
             (a process outside the sandbox holds it, or one survived the reap); not judged"
                .to_string(),
        );
    }
    // The judge seeks within the file itself and reads a bounded part of it.
    judge(manifest.runtime, file)
}
