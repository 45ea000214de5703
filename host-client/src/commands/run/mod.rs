//! `pitcrew run HARNESS [--engine local|podman|docker|exec|kubernetes] [--image IMAGE]
//! [--sandbox ID] [--iterations N] [--keep] [--json] [--workspace DIR] [--prompt TEXT]
//! [--env NAME=VALUE] [--records DIR]`.
//!
//! Validate the harness (refuse on problems), start or attach to a sandbox, compute the manifest
//! for the engine's layout, upload every plugin and skills tree, the adapters and the workspace,
//! set the manifest, then run iterations: up to N, stopping early when the harness's
//! `validation` command exits 0 after one. Each iteration is collected into
//! `<output>/<run id>/iteration-N/`. Ctrl-C sends `cancel`, collects what there is and exits 130;
//! a closed stdout or stderr does the same and exits 141.
//! A sandbox this run started is stopped and removed at the end unless `--keep`; one it was
//! given with `--sandbox` (kept by an earlier run, or made by someone else) is left running.
//!
//! This module checks the harness, starts and stops the sandbox and reports the run; the rest
//! is in its parts:
//!
//! - `drive`: the loop itself, from the compiled harness to the last collected iteration.
//! - `upload`: the harness's uploads put in place before the manifest is set.
//! - `progress`: what people see on stderr while it runs.
//! - `resume`: `--resume`, taking back a run whose host went away.
//! - `signals`: Ctrl-C (or a closed stdout or stderr), which cancels the running iteration.

mod drive;
mod lease;
pub mod model_keys;
mod progress;
mod resume;
mod signals;
mod upload;
mod validation;

use crate::engine::{EngineArgs, SandboxId, SandboxSpec};
use crate::hash_progress;
use crate::output::{errln, out, outln};
use crate::records;
use crate::report::{self, escape_controls};
use anyhow::{bail, Context as _};
use drive::{drive, Resumed};
use pitcrew_core::harness::{Harness, Overrides};
use progress::Progress;
use signals::{install_ctrlc, CancelSlot};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `pitcrew run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The harness file (YAML); with `--resume`, the orphaned run's own.
    #[arg(required_unless_present = "resume")]
    pub harness: Option<PathBuf>,
    /// Finish the run whose host went away in sandbox ID (`pitcrew ps` shows it `orphaned`):
    /// collect the records it left and run its remaining iterations, then stop the sandbox
    /// unless that run (or this one) keeps it.
    #[arg(long, value_name = "ID", conflicts_with_all = ["sandbox", "iterations", "workspace", "prompt", "env", "runner_env", "records", "collect_workspace", "model_key"])]
    pub resume: Option<String>,
    /// Engine options.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Run in this existing sandbox (one kept by an earlier run, any engine, found by its id
    /// like `pitcrew inspect` does; the exec engine's container name) instead of a new one.
    /// It is left running at the end.
    #[arg(long, value_name = "ID")]
    pub sandbox: Option<String>,
    /// Pass this variable of pitcrew's own environment into the new sandbox (repeatable; local,
    /// podman and docker engines). Nothing else of it reaches the sandbox but `PATH`, the locale (`LANG`,
    /// `LANGUAGE`, the `LC_*` categories), `TZ` and `RUST_LOG`.
    #[arg(long = "pass-env", value_name = "NAME")]
    pub pass_env: Vec<String>,
    /// Keep this model credential of pitcrew's environment on the host (repeatable): the
    /// sandbox gets `pitcrew-placeholder-NAME` in its place, and this host puts the value into
    /// the agent's model requests as it carries them (network `allow`; Claude Code, or pi whose
    /// pinned models.json sends the model to a loopback http:// endpoint). The runtime's key
    /// variables passed with `--pass-env` (ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN; for pi also
    /// OPENAI_API_KEY and those models.json's apiKey names) are kept so without it unless the
    /// network is `open`.
    #[arg(long = "model-key", value_name = "NAME")]
    pub model_key: Vec<String>,
    /// The model credentials' plan, made once the harness is read.
    #[arg(skip)]
    pub model_plan: Option<Box<model_keys::ModelPlan>>,
    /// Run at most N iterations (overrides the harness's `iterations`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(pitcrew_core::harness::MAX_ITERATIONS)))]
    pub iterations: Option<u32>,
    /// Keep the sandbox running at the end (its id is printed) for `inspect`, `collect`, `down`.
    #[arg(long)]
    pub keep: bool,
    /// Copy the whole workspace into each iteration's record (`workspace/`, within the record's
    /// budget): what the agent changed comes back with the record, not only `output/`.
    #[arg(long)]
    pub collect_workspace: bool,
    /// How long the sandbox waits for word from this run before it counts the run as
    /// orphaned (a host that hangs without closing its connection); renewed 4 times a lease.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = lease::parse_lease)]
    pub lease: std::time::Duration,
    /// Print one JSON document with the whole run instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Upload this host directory as the workspace instead of the harness's `workdir`.
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Use this prompt instead of the harness's (pi and claude).
    #[arg(long, value_name = "TEXT")]
    pub prompt: Option<String>,
    /// Set a variable of the sandbox environment over the harness's `env:` (repeatable; the
    /// same rules as `env:`).
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_assignment)]
    pub env: Vec<(String, String)>,
    /// Give the hook adapter and the runtime this runner variable (repeatable): names in a
    /// runner namespace only (`FULLSEND_*`), which no `.env`, harness `env:` or plugin `env:`
    /// may set. Set after the `.env` and the harness's `env:`; the record names the variable
    /// (layer `runner`), never its value.
    #[arg(long = "runner-env", value_name = "NAME=VALUE", value_parser = parse_runner_assignment)]
    pub runner_env: Vec<(String, String)>,
    /// Write the run's records below DIR (created) instead of the harness's `output`.
    #[arg(long, value_name = "DIR")]
    pub records: Option<PathBuf>,
}

impl RunArgs {
    /// The directory the run's records must stay inside: `--records`, else the harness's.
    fn records_base<'a>(&'a self, h: &'a Harness) -> &'a std::path::Path {
        self.records.as_deref().unwrap_or(&h.base)
    }
}

/// `NAME=VALUE` of `--env`.
pub fn parse_assignment(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(format!("{text:?}: expected NAME=VALUE")),
    }
}

/// `NAME=VALUE` of `--runner-env`: a runner name ([`pitcrew_core::env_policy::RUNNER_PREFIXES`])
/// and a value of one line.
pub fn parse_runner_assignment(text: &str) -> Result<(String, String), String> {
    let (name, value) = parse_assignment(text)?;
    match pitcrew_core::env_policy::runner_env_problems(&name, &value).first() {
        Some(problem) => Err(problem.to_string()),
        None => Ok((name, value)),
    }
}

/// The runner variables of `--runner-env`, each name once (a name given twice is an error: one
/// of the two would silently lose).
fn runner_env(args: &RunArgs) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let mut runner = std::collections::BTreeMap::new();
    for (name, value) in &args.runner_env {
        if runner.insert(name.clone(), value.clone()).is_some() {
            bail!("--runner-env {name}: given twice; keep one");
        }
    }
    Ok(runner)
}

/// Runs `pitcrew run`; `quiet` (the global `-q`) prints the records directory alone.
pub fn run(args: &RunArgs, verbose: u8, quiet: bool) -> anyhow::Result<ExitCode> {
    match &args.resume {
        Some(id) => {
            let (args, resumed, keep) = resume::take_back(args, id)?;
            run_harness(&args, verbose, quiet, Some((resumed, keep)))
        }
        None => run_harness(args, verbose, quiet, None),
    }
}

/// Runs the harness of `args`, or finishes the orphaned run `resumed` (whose own `--keep` says
/// whether the sandbox outlives it).
fn run_harness(
    args: &RunArgs,
    verbose: u8,
    quiet: bool,
    resumed: Option<(Resumed, bool)>,
) -> anyhow::Result<ExitCode> {
    let path = args
        .harness
        .as_deref()
        .context("a harness file is needed (or --resume ID)")?;
    let mut validated = hash_progress::watch(quiet, |p| crate::remote::validate(path, p))?;
    let file = path.display().to_string();
    if !validated.is_ok() {
        for p in &validated.problems {
            errln!("{}", escape_controls(&format!("{file}:{p}")));
        }
        bail!(
            "{file}: {} problem(s); nothing was started",
            validated.problems.len()
        );
    }
    // What the content scan found in the trees this run uploads, local and remote alike, as
    // `validate` says it.
    for note in validated
        .notes
        .iter()
        .filter(|n| n.message.starts_with("content scan: "))
    {
        errln!("{}", escape_controls(&format!("{file}:{note} (note)")));
    }
    let Some(mut h) = validated.harness.clone() else {
        bail!("{file}: not a harness");
    };
    let overrides = Overrides {
        workspace: args.workspace.clone(),
        prompt: args.prompt.clone(),
        env: args.env.clone(),
    };
    if !overrides.is_empty() {
        h = h
            .with_overrides(&overrides)
            .map_err(|problems| anyhow::anyhow!("{}; nothing was started", problems.join("; ")))?;
    }
    let records = match &args.records {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("--records {}: create", dir.display()))?;
            let dir = std::path::absolute(dir)?;
            h.output = dir.clone();
            Some(dir)
        }
        None => None,
    };
    let args = &RunArgs {
        records,
        ..args.clone()
    };
    validated.harness = Some(h.clone());
    if let Some(problem) = pass_env_conflict(&args.pass_env, &h) {
        bail!("{problem}");
    }
    runner_env(args)?;
    let model_plan = model_keys::plan(
        &args.model_key,
        &args.pass_env,
        &h,
        &validated.pi_config,
        validated.network().as_ref().map(|n| &n.policy),
        |name| std::env::var(name).ok(),
    )?;
    let model_notes = model_plan.notes.clone();
    // A `--model-key` name not passed reaches the sandbox only as the supervisor's pin of its
    // placeholder (engines without `--pass-env`, such as exec and kubernetes, take it too).
    let args = &RunArgs {
        model_plan: Some(Box::new(model_plan)),
        ..args.clone()
    };
    let slot = CancelSlot::default();
    install_ctrlc(slot.clone());

    let engine = match &args.sandbox {
        Some(existing) => args.engine.engine_for(&SandboxId(existing.clone()))?,
        None => args.engine.engine()?,
    };
    // The local engine runs the agent from this host's PATH: one its supervisor could not
    // launch (the verify step's own rule, env-shebang interpreter included) would fail every
    // iteration with 126 or 127, so it is said before a sandbox exists.
    if engine.name() == "local" && resumed.is_none() {
        let path = std::env::var("PATH").unwrap_or_default();
        if let Err(failure) = pitcrew_core::verify::agent_launchable(&h.agent_program(), &path) {
            bail!(
                "{file}: the agent cannot run with the local engine: {}; nothing was started",
                failure.reason
            );
        }
    }
    let progress = Progress::new(verbose > 0, quiet);
    for note in &model_notes {
        progress.warn(&format!("note: {note}"));
    }
    progress.status(&format!("starting a {} sandbox", engine.name()));
    let id = engine.start(&SandboxSpec {
        existing: args.sandbox.clone(),
        pass_env: args.pass_env.clone(),
        // Model credentials stay here: the sandbox gets their placeholders.
        placeholders: args
            .model_plan
            .as_ref()
            .map(|p| p.names.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|n| args.pass_env.contains(n))
            .collect(),
        memory_bytes: h.memory,
        processes: h.processes,
        upload_limits: h.upload_limits,
        // The harness's `network:` or the runtime's default (its model endpoint).
        private_network: validated.network().is_some_and(|n| {
            matches!(
                n.policy,
                pitcrew_core::manifest::NetworkPolicy::None
                    | pitcrew_core::manifest::NetworkPolicy::Allow { .. }
            )
        }),
    })?;
    // A sandbox this run did not start is left as it was found; a resumed run ends as the run
    // it finishes would have.
    let resuming = resumed.is_some();
    let kept = match &resumed {
        Some((_, keep)) => args.keep || *keep,
        None => args.keep || args.sandbox.is_some(),
    };
    if !kept {
        slot.leaves(Some(id.0.clone()));
    }
    progress.line(&format!("sandbox {id} ({})", engine.name()));

    let outcome = drive(
        args,
        verbose,
        &*engine,
        &id,
        &validated,
        &h,
        &progress,
        &slot,
        kept,
        resumed.map(|(r, _)| r),
    );
    progress.finish();
    slot.disarm();

    // A run that holds every record it ran (the sandbox is its own) stops it at once; after a
    // failure, or a resume, the sandbox is asked first what it still holds alone.
    let all_held = !resuming
        && outcome
            .as_ref()
            .is_ok_and(|r| r.rows.iter().all(|row| row.record_dir.is_some()));
    let stop = if kept {
        Ok(Default::default())
    } else if all_held {
        engine.stop(&id, false)
    } else {
        crate::engine::stop_keeping_records(&*engine, &id, false, false)
    };
    match stop {
        Ok(outcome) => {
            if let Some(why) = outcome.warning {
                errln!(
                    "pitcrew: sandbox {}: {}",
                    escape_controls(&id.0),
                    escape_controls(&why)
                );
            }
        }
        Err(e) => errln!("pitcrew: {}", escape_controls(&format!("{e:#}"))),
    }
    let report = outcome?;
    let code = report.exit_code;
    let doc = report::RunDocument {
        run_id: report.run_id.clone(),
        harness: file.clone(),
        engine: engine.name().to_string(),
        sandbox: id.0.clone(),
        kept,
        run_dir: report.run_dir.clone(),
        stopped: report.stopped,
        exit_code: code,
        iterations: report.rows.clone(),
    };
    let doc_text = serde_json::to_string_pretty(&doc)?;
    let written = records::open_run_dir(args.records_base(&h), &h.output, &report.run_id)
        .and_then(|(_, dir)| Ok(records::write_in(&dir, "run.json", doc_text.as_bytes())?));
    if let Err(e) = written {
        progress.warn(&format!("{}/run.json: {e:#}", report.run_dir));
    }
    // Everything is done and recorded: a closed stdout only ends the printing.
    if args.json {
        outln!("{doc_text}")?;
    } else if quiet {
        outln!("{}", escape_controls(&report.run_dir))?;
        if kept {
            outln!("{}", escape_controls(&id.0))?;
        }
    } else {
        out!("{}", report::table(&report.rows, report::colour_wanted()))?;
        outln!("records: {}", escape_controls(&report.run_dir))?;
        if kept {
            let id = escape_controls(&id.0);
            outln!("sandbox kept: {id} (pitcrew inspect {id}; pitcrew down {id})")?;
        }
    }
    Ok(ExitCode::from(code))
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

#[cfg(test)]
mod tests {
    use super::pass_env_conflict;

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
    fn what_an_older_supervisor_lacks_is_refused_before_anything_is_sent() {
        use super::drive::older_supervisor;
        use super::progress::Progress;
        use pitcrew_core::harness::SandboxLayout;
        let dir = tempfile::tempdir().unwrap();
        let yaml = "runtime: pi\nprompt: hi\nagent:\n  tools: []\nvalidation: [/bin/true]\nfeedback: true\n";
        std::fs::write(dir.path().join("h.yaml"), yaml).unwrap();
        let validated = pitcrew_core::harness::validate(&dir.path().join("h.yaml")).unwrap();
        let h = validated.harness.clone().expect("a valid harness");
        let layout = SandboxLayout {
            root: "/pitcrew".into(),
        };
        let mut manifest = validated.manifest(&layout).unwrap();
        manifest.env.passed = vec!["KEY".into()];
        let quiet = Progress::new(false, true);
        let err = older_supervisor(&mut manifest, &h, &[], &quiet).unwrap_err();
        let err = format!("{err:#}");
        assert!(
            err.contains("agent.tools: []") && err.contains("feedback"),
            "{err}"
        );
        assert!(manifest.env.passed.is_empty());
        let all: Vec<String> = pitcrew_core::protocol::FEATURES
            .iter()
            .map(|f| f.to_string())
            .collect();
        manifest.env.passed = vec!["KEY".into()];
        older_supervisor(&mut manifest, &h, &all, &quiet).unwrap();
        assert_eq!(manifest.env.passed, ["KEY"]);

        // The default `uploaded` becomes what an older supervisor does; asked for, it is refused.
        use pitcrew_core::manifest::ContextFiles;
        let mut manifest = validated.manifest(&layout).unwrap();
        assert_eq!(manifest.agent.context_files, ContextFiles::Uploaded);
        older_supervisor(&mut manifest, &h, &all, &quiet).unwrap();
        assert_eq!(manifest.agent.context_files, ContextFiles::Uploaded);
        let older: Vec<String> = all
            .iter()
            .filter(|f| *f != "agent.context_files.uploaded")
            .cloned()
            .collect();
        older_supervisor(&mut manifest, &h, &older, &quiet).unwrap();
        assert_eq!(manifest.agent.context_files, ContextFiles::AsIs);
        let mut asked = h.clone();
        asked.agent.context_files = Some(ContextFiles::Uploaded);
        let mut manifest = validated.manifest(&layout).unwrap();
        let err = older_supervisor(&mut manifest, &asked, &older, &quiet).unwrap_err();
        assert!(
            format!("{err:#}").contains("agent.context_files: uploaded"),
            "{err:#}"
        );
    }

    #[test]
    fn the_default_network_is_dropped_for_a_supervisor_without_the_feature() {
        use super::drive::{older_supervisor, NETWORK_FEATURE};
        use super::progress::Progress;
        use pitcrew_core::harness::SandboxLayout;
        use pitcrew_core::manifest::NetworkPolicy;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("h.yaml");
        std::fs::write(&file, "runtime: command\ncommand: [/bin/true]\n").unwrap();
        let validated = pitcrew_core::harness::validate(&file).unwrap();
        let h = validated.harness.clone().expect("a valid harness");
        let layout = SandboxLayout {
            root: "/pitcrew".into(),
        };
        let quiet = Progress::new(false, true);
        let older: Vec<String> = pitcrew_core::protocol::FEATURES
            .iter()
            .filter(|f| **f != NETWORK_FEATURE)
            .map(|f| f.to_string())
            .collect();
        let mut manifest = validated.manifest(&layout).unwrap();
        assert_eq!(manifest.network, Some(NetworkPolicy::None));
        older_supervisor(&mut manifest, &h, &older, &quiet).unwrap();
        assert_eq!(manifest.network, None);
        let mut all = older;
        all.push(NETWORK_FEATURE.into());
        let mut manifest = validated.manifest(&layout).unwrap();
        older_supervisor(&mut manifest, &h, &all, &quiet).unwrap();
        assert_eq!(manifest.network, Some(NetworkPolicy::None));
    }

    #[test]
    fn network_is_refused_by_a_supervisor_without_the_feature() {
        use super::drive::older_supervisor;
        use super::progress::Progress;
        use pitcrew_core::harness::SandboxLayout;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("h.yaml");
        std::fs::write(&file, "runtime: pi\nprompt: hi\nnetwork: none\n").unwrap();
        let validated = pitcrew_core::harness::validate(&file).unwrap();
        let h = validated.harness.clone().expect("a valid harness");
        let layout = SandboxLayout {
            root: "/pitcrew".into(),
        };
        let mut manifest = validated.manifest(&layout).unwrap();
        let quiet = Progress::new(false, true);
        let older: Vec<String> = pitcrew_core::protocol::FEATURES
            .iter()
            .filter(|f| **f != "network")
            .map(|f| f.to_string())
            .collect();
        let err = older_supervisor(&mut manifest, &h, &older, &quiet).unwrap_err();
        let err = format!("{err:#}");
        assert!(err.contains("does not know network"), "{err}");
        let mut all = older;
        all.push("network".into());
        older_supervisor(&mut manifest, &h, &all, &quiet).unwrap();
    }

    #[test]
    fn runner_env_is_refused_by_an_older_supervisor_and_checked_on_the_host() {
        use super::drive::older_supervisor;
        use super::progress::Progress;
        use pitcrew_core::harness::SandboxLayout;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("h.yaml"), "runtime: pi\nprompt: hi\n").unwrap();
        let validated = pitcrew_core::harness::validate(&dir.path().join("h.yaml")).unwrap();
        let h = validated.harness.clone().expect("a valid harness");
        let layout = SandboxLayout {
            root: "/pitcrew".into(),
        };
        let mut manifest = validated.manifest(&layout).unwrap();
        manifest
            .env
            .runner
            .insert("FULLSEND_TOOL_ALLOWLIST".into(), "read".into());
        let quiet = Progress::new(false, true);
        let older: Vec<String> = pitcrew_core::protocol::FEATURES
            .iter()
            .filter(|f| **f != "env.runner")
            .map(|f| f.to_string())
            .collect();
        let err = older_supervisor(&mut manifest, &h, &older, &quiet).unwrap_err();
        assert!(format!("{err:#}").contains("--runner-env"), "{err:#}");
        let mut all = older;
        all.push("env.runner".into());
        older_supervisor(&mut manifest, &h, &all, &quiet).unwrap();
        assert_eq!(manifest.env.runner.len(), 1);

        assert_eq!(
            super::parse_runner_assignment("FULLSEND_CANARY=a=b").unwrap(),
            ("FULLSEND_CANARY".into(), "a=b".into())
        );
        for text in ["PATH=/x", "PITCREW_X=1", "FULLSEND_X"] {
            assert!(super::parse_runner_assignment(text).is_err(), "{text}");
        }
    }
}
