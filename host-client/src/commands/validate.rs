//! `pitcrew validate HARNESS [--json] [--emit-manifest]`.

use crate::hash_progress;
use crate::output::{errln, outln};
use crate::remote;
use crate::report::escape_controls;
use anyhow::Context as _;
use pitcrew_core::harness::{SandboxLayout, Validated};
use pitcrew_core::manifest::NetworkPolicy;
use pitcrew_core::plugin_format::PluginClass;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `pitcrew validate`.
#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// The harness file (YAML).
    pub harness: PathBuf,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Print the manifest the supervisor would receive (JSON) instead of a report.
    #[arg(long, conflicts_with = "json")]
    pub emit_manifest: bool,
    /// Where uploads live inside the sandbox (for --emit-manifest).
    #[arg(long, default_value = "/pitcrew", value_name = "DIR")]
    pub sandbox_root: String,
}

/// Runs `pitcrew validate`: exit 0 when the harness is clean, 1 when it has problems. `quiet`
/// (`-q`) hides the progress of long hashes.
pub fn run(args: &ValidateArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    let validated = hash_progress::watch(quiet, |p| remote::validate(&args.harness, p))?;
    let file = args.harness.display().to_string();
    if args.emit_manifest {
        if let Some(manifest) = validated.manifest(&SandboxLayout {
            root: args.sandbox_root.clone(),
        }) {
            manifest
                .validate()
                .context("the manifest built from this harness is invalid")?;
            outln!("{}", manifest.to_json_pretty())?;
            return Ok(ExitCode::SUCCESS);
        }
        print_problems(&file, &validated);
        return Ok(ExitCode::FAILURE);
    }
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json_report(&file, &validated))?
        )?;
    } else {
        print_report(&file, &validated)?;
    }
    Ok(if validated.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Prints each problem as `FILE:LINE:COLUMN: field: message`, escaped: problems quote paths and
/// names from the harness directory.
pub(crate) fn print_problems(file: &str, v: &Validated) {
    for p in &v.problems {
        errln!("{}", escape_controls(&format!("{file}:{p}")));
    }
    errln!(
        "{}: {} problem{}",
        escape_controls(file),
        v.problems.len(),
        if v.problems.len() == 1 { "" } else { "s" }
    );
}

/// Prints one line of the text report, escaped for the terminal.
fn line(text: &str) -> std::io::Result<()> {
    outln!("{}", escape_controls(text))
}

/// Prints the text report: notes, then the problems (on stderr) or what the harness holds.
fn print_report(file: &str, v: &Validated) -> std::io::Result<()> {
    for n in &v.notes {
        line(&format!("{file}:{n} (note)"))?;
    }
    if !v.is_ok() {
        print_problems(file, v);
        return Ok(());
    }
    let Some(h) = &v.harness else { return Ok(()) };
    line(&format!(
        "{file}: ok: runtime {}, {} plugin(s), {} skills dir(s), {} adapter(s), {} iteration(s), timeout {}s",
        h.runtime.as_str(),
        v.plugins.len() + v.plugin_files.len(),
        v.skills.len(),
        v.adapters.len(),
        h.iterations,
        h.timeout.as_secs()
    ))?;
    print_network(v)?;
    for p in &v.plugins {
        let what = match &p.class {
            PluginClass::Pi(pi) => format!("pi extension ({}): {}", pi.rule, pi.entries.join(", ")),
            PluginClass::Claude(c) => format!("claude plugin {:?} ({})", c.name, c.manifest),
            PluginClass::Codex(c) => {
                format!("codex plugin {:?} (.codex-plugin/plugin.json)", c.name)
            }
            PluginClass::Opencode(o) => format!("opencode plugin: {}", o.entries.join(", ")),
        };
        let skipped = if p.loaded {
            ""
        } else {
            " [skipped by this runtime]"
        };
        line(&format!("  plugin {}: {what}{skipped}", p.spec.name))?;
        line(&format!(
            "    pi-tree-v1 {} ({} files)",
            p.digest.sha256,
            p.digest.listing.files.len()
        ))?;
    }
    for p in &v.plugin_files {
        let skipped = if p.loaded {
            ""
        } else {
            " [skipped by this runtime]"
        };
        line(&format!(
            "  plugin {}: single-file pi extension{skipped}: sha256 {}",
            p.spec.name, p.sha256
        ))?;
    }
    for s in &v.skills {
        line(&format!(
            "  skills {}: pi-tree-v1 {}",
            s.spec.name, s.digest.sha256
        ))?;
    }
    for a in &v.adapters {
        let to = a
            .spec
            .to
            .as_ref()
            .map(|to| format!(" → config/{to}"))
            .unwrap_or_default();
        line(&format!(
            "  adapter {} ({}){to}: sha256 {}",
            a.spec.path, a.spec.role, a.sha256
        ))?;
    }
    Ok(())
}

/// Prints the network that will apply, each allowed endpoint with where it came from; `open`
/// gets a warning line on stderr, and what the default could not cover a note each.
fn print_network(v: &Validated) -> std::io::Result<()> {
    let Some(network) = v.network() else {
        return Ok(());
    };
    line(&format!("  network: {}", network.summary()))?;
    for note in network_notes(v, &network) {
        line(&format!("  network: note: {note}"))?;
    }
    match &network.policy {
        NetworkPolicy::Open => errln!(
            "warning: network: open: the agent reaches whatever the engine's network reaches; \
             pitcrew neither limits nor accounts its connections"
        ),
        NetworkPolicy::Platform { platform } => errln!(
            "warning: network: platform {platform}: the platform's own policy decides what the \
             agent reaches; pitcrew neither limits nor accounts its connections, and starts the \
             agent only where the platform's proxy is in the sandbox's environment"
        ),
        _ => {}
    }
    Ok(())
}

/// What the default could not cover, and under pi whether a passed model key enters the
/// sandbox as it is ([`crate::commands::run::model_keys::pi_note`]).
fn network_notes(v: &Validated, network: &pitcrew_core::harness::NetworkChoice) -> Vec<String> {
    let mut notes = network.notes.clone();
    if let Some(h) = &v.harness {
        notes.extend(crate::commands::run::model_keys::pi_note(
            h,
            &v.pi_config,
            &network.policy,
        ));
    }
    notes
}

fn json_report(file: &str, v: &Validated) -> serde_json::Value {
    serde_json::json!({
        "harness": file,
        "ok": v.is_ok(),
        "problems": v.problems,
        "notes": v.notes,
        "runtime": v.harness.as_ref().map(|h| h.runtime.as_str()),
        "network": v.network().map(|n| serde_json::json!({
            "mode": n.policy.mode_name(),
            "from": n.policy.dial_from().name(),
            "allow": n.policy.allowed().iter().zip(&n.sources).map(|(e, from)| serde_json::json!({
                "endpoint": e.to_string(), "from": from,
            })).collect::<Vec<_>>(),
            "default": !n.explicit,
            "notes": network_notes(v, &n),
        })),
        "plugins": v.plugins.iter().map(|p| serde_json::json!({
            "name": p.spec.name,
            "path": p.spec.path,
            "class": p.class,
            "loaded": p.loaded,
            "format": "pi-tree-v1",
            "sha256": p.digest.sha256,
            "file_count": p.digest.listing.files.len(),
        })).chain(v.plugin_files.iter().map(|p| serde_json::json!({
            "name": p.spec.name,
            "path": p.spec.path,
            "class": {"kind": "pi-file"},
            "loaded": p.loaded,
            "format": "sha256",
            "sha256": p.sha256,
            "size": p.size,
        }))).collect::<Vec<_>>(),
        "skills": v.skills.iter().map(|s| serde_json::json!({
            "name": s.spec.name, "path": s.spec.path, "sha256": s.digest.sha256,
        })).collect::<Vec<_>>(),
        "adapters": v.adapters.iter().map(|a| serde_json::json!({
            "path": a.spec.path, "role": a.spec.role, "use": a.spec.usage, "to": a.spec.to, "sha256": a.sha256, "size": a.size,
        })).collect::<Vec<_>>(),
    })
}
