//! The harness file (YAML): what a run loads, checked completely before anything runs.
//!
//! A harness reads like a specification: one key, one effect (reference: `README.md` and
//! `docs/manifest.md`). [`validate`] runs every check and reports *all* problems at once, each
//! with its `line:column` in the file; [`Validated::compile`] then turns a clean harness into
//! the [`Manifest`](crate::manifest::Manifest) the supervisor verifies against, with every
//! expected digest computed from the host's own copies, and the [`Upload`]s that put those
//! copies in place ([`Validated::manifest`] when only the manifest is wanted).
//!
//! Paths in a harness are relative to the harness file and must stay inside its directory.
//!
//! The parts, in the order a harness goes through them:
//!
//! - `model`: the types: [`Harness`] and its entries, [`Problem`]s, [`Validated`].
//! - `yaml`: the YAML loader, node locations and the checker's typed accessors.
//! - `keys`: the top-level keys checked into a [`Harness`], every number within its maximum
//!   ([`MAX_TIMEOUT`] and the others).
//! - `entries`: the `plugins`, `adapters` and `skills` lists.
//! - `remote`: pinned remote entries (forge URLs with `#sha256=`) and who resolves them
//!   ([`RemoteSources`]).
//! - `units`: sizes and durations ([`parse_size`], [`parse_duration_at_most`]).
//! - `fs_checks`: what needs the file system: local paths, the records directory
//!   ([`check_output_dir`]), plugin formats, digests.
//! - `skill_checks`: what a `skills:` entry may hold (one skill, text only).
//! - `layout`: where things go inside the sandbox ([`SandboxLayout`]).
//! - `network`: the network that applies: the `network:` key or the runtime's default, each
//!   endpoint with where it came from ([`network_default`], [`NetworkChoice`]).
//! - `compile`: the manifest and the uploads ([`Compiled`], [`Upload`]).
//! - `overrides`: what varies per task ([`Overrides`]: workspace, prompt, env), checked like
//!   the keys they replace.

mod compile;
mod entries;
mod fs_checks;
mod keys;
mod layout;
mod model;
mod network;
mod overrides;
mod pi_models_rewrite;
mod remote;
mod skill_checks;
mod units;
mod yaml;

#[cfg(test)]
mod tests;

pub use self::compile::{too_big_to_send, Compiled, Upload, UploadKind};
pub use self::fs_checks::{check_output_dir, find_program};
pub use self::keys::{
    MAX_DISK_BYTES, MAX_FEEDBACK, MAX_ITERATIONS, MAX_MEMORY_BYTES, MAX_PROCESSES,
    MAX_RETAINED_BYTES, MAX_RETAINED_RECORDS, MAX_TIMEOUT, MAX_UPLOAD_BYTES, MAX_UPLOAD_ENTRIES,
};
pub use self::layout::SandboxLayout;
pub use self::model::{
    AdapterSpec, AgentSection, CheckedAdapter, CheckedPlugin, CheckedPluginFile, CheckedSkill,
    Harness, HarnessError, Location, PluginSpec, Problem, SkillSpec, Validated,
};
pub use self::network::{
    network_default, network_for, pi_builtin_route, pi_provider_keys, read_models_json,
    read_settings_json, url_endpoint, NetworkChoice, PiModelConfig, PinnedConfig, CLAUDE_API_HOST,
    PI_PROVIDER_HOSTS, PI_PROVIDER_URLS,
};
pub use self::overrides::Overrides;
pub use self::pi_models_rewrite::{rewrite as rewrite_pi_models_json, RewrittenModels};
pub use self::remote::{
    NoRemoteSources, RemoteKind, RemoteSource, RemoteSources, Resolved, REMOTE_FORM,
};
pub use self::units::{parse_duration_at_most, parse_size};
pub use crate::manifest::Runtime;

use self::yaml::{parse_yaml, Checker};
use crate::tree_hash::HashProgress;
use std::path::Path;

/// Reads and validates a harness file: shapes, paths, plugin formats, env and argument rules,
/// tree digests. All problems are collected; only an unreadable or unparsable file is an `Err`.
pub fn validate(file: &Path) -> Result<Validated, HarnessError> {
    validate_watched(file, None)
}

/// [`validate`], counting the digests' work into `progress` (a display for long hashes).
/// Remote entries are refused ([`NoRemoteSources`]); [`validate_with`] resolves them.
pub fn validate_watched(
    file: &Path,
    progress: Option<&HashProgress>,
) -> Result<Validated, HarnessError> {
    validate_with(file, progress, &mut NoRemoteSources)
}

/// [`validate_watched`] with the remote entries (pinned forge URLs) resolved by `remotes` to
/// their verified local copies, which are then checked and hashed like local paths.
pub fn validate_with(
    file: &Path,
    progress: Option<&HashProgress>,
    remotes: &mut dyn RemoteSources,
) -> Result<Validated, HarnessError> {
    let text = std::fs::read_to_string(file).map_err(|error| HarnessError::Read {
        path: file.to_path_buf(),
        error,
    })?;
    let node = parse_yaml(file, &text)?;
    let base = file
        .parent()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .unwrap_or(Path::new("."));
    let base = base.canonicalize().map_err(|error| HarnessError::Read {
        path: base.to_path_buf(),
        error,
    })?;
    let mut cx = Checker::new(base, remotes);
    let harness = cx.harness(file, &node);
    let mut out = Validated {
        harness: None,
        plugins: Vec::new(),
        plugin_files: Vec::new(),
        skills: Vec::new(),
        adapters: Vec::new(),
        problems: Vec::new(),
        notes: Vec::new(),
        pi_config: Default::default(),
    };
    if let Some(h) = &harness {
        cx.deep_checks(h, &node, &mut out, progress);
        out.pi_config = cx.network_inputs(h, &node, &out.adapters);
    }
    out.harness = harness;
    out.problems = cx.problems;
    out.notes = cx.notes;
    // The manifest, its trees' listings aside (they travel in requests of their own), must
    // travel in one control frame (measured with the shortest sandbox root; `pitcrew run` checks
    // the real one before it sends anything).
    if out.problems.is_empty() {
        let layout = SandboxLayout {
            root: "/pitcrew".into(),
        };
        if let Some(why) = out
            .manifest(&layout)
            .as_ref()
            .and_then(|m| too_big_to_send(m, false))
        {
            out.problems.push(Problem {
                location: None,
                field: "plugins".into(),
                message: why,
            });
        }
    }
    out.problems
        .sort_by_key(|p| p.location.map(|l| (l.line, l.column)));
    Ok(out)
}
