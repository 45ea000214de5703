//! The checks that need the file system: harness paths resolved and kept inside the harness
//! directory, the records directory walked without following links, plugin formats and their
//! registered flags, tree digests (which refuse symlinks and special files), adapter files and
//! duplicate upload names.

use super::model::{
    CheckedAdapter, CheckedPlugin, CheckedPluginFile, CheckedSkill, Harness, Location, PluginSpec,
    Validated,
};
use super::remote::{RemoteKind, RemoteSource};
use super::skill_checks;
use super::yaml::{location, Checker};
use crate::env_policy;
use crate::exit_code::PinRole;
use crate::manifest::Runtime;
use crate::plugin_format::{self, PluginClass};
use crate::tree_hash::{self, HashProgress, TreeDigest, TreeFormat};
use marked_yaml::Node;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

/// Why the tree of `listing` would not fit one upload under `limits` (the harness's
/// `upload_limits`: entries, files and directories with the tree's own, and bytes of file
/// content), if it would not: said here, before anything is sent, rather than by the sandbox
/// after the upload.
pub(super) fn over_upload_limits(
    listing: &tree_hash::TreeListing,
    limits: &crate::protocol::UploadLimits,
) -> Option<String> {
    over_limits(
        (listing.files.len() + listing.dirs.len() + 1) as u64,
        listing.total_bytes(),
        limits,
    )
}

/// [`over_upload_limits`] of a tree of `entries` entries and `bytes` bytes of file content.
pub(super) fn over_limits(
    entries: u64,
    bytes: u64,
    limits: &crate::protocol::UploadLimits,
) -> Option<String> {
    if entries > limits.max_entries {
        Some(format!(
            "{entries} entries (files and directories), over the {} one upload may hold \
             (upload_limits.entries raises it)",
            limits.max_entries
        ))
    } else if bytes > limits.max_bytes {
        Some(format!(
            "{bytes} bytes of file content, over the {} one upload may hold \
             (upload_limits.size raises it)",
            limits.max_bytes
        ))
    } else {
        None
    }
}

/// Checks the records directory `output` (below the harness directory `base`) without
/// following links: a symlink in any component below `base` is refused, since records written
/// through it would land outside the harness directory; so is a component that is not a
/// directory. Components that do not exist yet are fine (`pitcrew run` creates them, again
/// without following links). The error names the offending path.
pub fn check_output_dir(base: &Path, output: &Path) -> Result<(), String> {
    let rel = output.strip_prefix(base).map_err(|_| {
        format!(
            "{} is not inside the harness directory {}",
            output.display(),
            base.display()
        )
    })?;
    let mut reached = base.to_path_buf();
    for component in rel.components() {
        match component {
            Component::Normal(name) => reached.push(name),
            Component::CurDir => continue,
            _ => {
                return Err(format!(
                    "{}: only plain names below the harness directory",
                    output.display()
                ))
            }
        }
        match std::fs::symlink_metadata(&reached) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(format!(
                    "{} is a symlink: records are written only to real directories inside the \
                     harness directory (links are not followed)",
                    reached.display()
                ))
            }
            Ok(meta) if !meta.is_dir() => {
                return Err(format!("{} is not a directory", reached.display()))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(format!("{}: {e}", reached.display())),
        }
    }
    Ok(())
}

/// The last component of `path` (the upload name of a directory or file).
pub(super) fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl Checker<'_> {
    /// What a `plugins:`, `skills:` or `adapters:` entry names, with the name it uploads under
    /// and, for a remote source, its pin:
    /// a local path (resolved by [`Checker::local_path`], its content scan's findings noted:
    /// [`RemoteSources::scan_local`](super::remote::RemoteSources::scan_local)) or a pinned remote source of kind
    /// `want`, resolved to its verified local copy by the checker's
    /// [`RemoteSources`](super::remote::RemoteSources). One URL has one pin in a harness.
    pub(super) fn source_path(
        &mut self,
        at: Option<Location>,
        field: &str,
        raw: &str,
        want: RemoteKind,
    ) -> Option<(PathBuf, String, Option<String>)> {
        let source = match RemoteSource::parse(raw) {
            Ok(None) => {
                let path = self.local_path(at, field, raw)?;
                let name = file_name(&path);
                for note in self.remotes.scan_local(&path, &name) {
                    self.note(at, field, note);
                }
                return Some((path, name, None));
            }
            Ok(Some(source)) => source,
            Err(why) => {
                self.problem(at, field, why);
                return None;
            }
        };
        if source.kind != want {
            let what = match want {
                RemoteKind::Tree => "a directory (…/tree/<ref>/<dir>)",
                RemoteKind::Blob => "a file (…/blob/<ref>/<file>)",
            };
            self.problem(
                at,
                field,
                format!("{}: this entry takes {what}", source.url),
            );
            return None;
        }
        match self.pins.get(&source.url) {
            Some((pin, first)) if *pin != source.sha256 => {
                let first = first.clone();
                self.problem(
                    at,
                    field,
                    format!(
                        "{} is pinned here with sha256={} and in {first} with sha256={pin}: one \
                         URL has one pin",
                        source.url, source.sha256
                    ),
                );
                return None;
            }
            Some(_) => {}
            None => {
                self.pins.insert(
                    source.url.clone(),
                    (source.sha256.clone(), field.to_string()),
                );
            }
        }
        match self.remotes.resolve(&source, field) {
            Ok(resolved) => {
                if let Some(listing) = resolved.listing {
                    self.remote_listings.insert(resolved.path.clone(), listing);
                }
                for note in resolved.notes {
                    self.note(at, field, note);
                }
                let refused = !resolved.problems.is_empty();
                for problem in resolved.problems {
                    self.problem(at, field, problem);
                }
                (!refused).then(|| {
                    (
                        resolved.path,
                        source.name().to_string(),
                        Some(source.sha256.clone()),
                    )
                })
            }
            Err(why) => {
                self.problem(at, field, why);
                None
            }
        }
    }

    /// Resolves a harness-relative path: refuses URLs, absolute paths, `..` and
    /// anything that resolves (through symlinks) outside the harness directory.
    pub(super) fn local_path(
        &mut self,
        at: Option<Location>,
        field: &str,
        raw: &str,
    ) -> Option<PathBuf> {
        if !matches!(RemoteSource::parse(raw), Ok(None)) {
            self.problem(
                at,
                field,
                format!(
                    "{raw:?}: a URL is refused here; use a local path (only plugins, skills and \
                     adapters take pinned remote sources)"
                ),
            );
            return None;
        }
        if raw.is_empty() {
            self.problem(at, field, "empty path");
            return None;
        }
        let rel = Path::new(raw);
        if rel.is_absolute() {
            self.problem(
                at,
                field,
                format!("{raw:?} is absolute; paths are relative to the harness file"),
            );
            return None;
        }
        if rel.components().any(|c| matches!(c, Component::ParentDir)) {
            self.problem(
                at,
                field,
                format!("{raw:?} has a '..' segment; paths must stay inside the harness directory"),
            );
            return None;
        }
        let joined = self.base.join(rel);
        match joined.canonicalize() {
            Ok(real) if real.starts_with(&self.base) => Some(real),
            Ok(real) => {
                self.problem(
                    at,
                    field,
                    format!(
                        "{raw:?} resolves to {} outside the harness directory {}",
                        real.display(),
                        self.base.display()
                    ),
                );
                None
            }
            // Said with what to do, not as the system's "os error 2".
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && raw.contains("#sha256=") => {
                self.problem(
                    at,
                    field,
                    format!(
                        "{raw:?} does not exist: `#sha256=` pins a remote source (a forge URL); \
                         {}: drop `#sha256=…` from the path",
                        super::yaml::LOCAL_PINNED
                    ),
                );
                None
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                self.problem(
                    at,
                    field,
                    format!(
                        "{raw:?} does not exist ({}): paths are relative to the harness file's \
                         directory {}; create it there, or correct the path",
                        joined.display(),
                        self.base.display()
                    ),
                );
                None
            }
            Err(err) => {
                self.problem(at, field, format!("{}: {err}", joined.display()));
                None
            }
        }
    }

    /// The `pi-tree-v1` digest of the tree at `path`: from the listing a remote tree was
    /// verified with, else hashed now.
    fn tree_digest(
        &mut self,
        path: &Path,
        progress: Option<&HashProgress>,
    ) -> Result<TreeDigest, tree_hash::TreeError> {
        match self.remote_listings.remove(path) {
            Some(listing) => Ok(TreeDigest {
                format: TreeFormat::PiTreeV1,
                sha256: listing.digest(TreeFormat::PiTreeV1),
                listing,
                executables: None,
            }),
            None => tree_hash::hash_tree_watched(path, TreeFormat::PiTreeV1, progress),
        }
    }

    /// Checks that need the file system: plugin formats and registered flags, tree digests
    /// (which refuse symlinks and special files), adapter files, duplicate upload names.
    pub(super) fn deep_checks(
        &mut self,
        h: &Harness,
        node: &Node,
        out: &mut Validated,
        progress: Option<&HashProgress>,
    ) {
        let top = node.as_mapping();
        let item_loc = |key: &str, i: usize| -> Option<Location> {
            top.and_then(|m| m.get_sequence(key))
                .and_then(|s| s.get_node(i))
                .and_then(location)
        };
        let mut names: BTreeMap<String, usize> = BTreeMap::new();
        let mut registered = Vec::new();
        for (i, spec) in h.plugins.iter().enumerate() {
            let at = item_loc("plugins", i);
            let field = format!("plugins[{i}]");
            if let Some(first) = names.insert(spec.name.clone(), i) {
                self.problem(
                    at,
                    &field,
                    format!(
                        "uploads under the same name {:?} as plugins[{first}]; rename one directory",
                        spec.name
                    ),
                );
            }
            if h.runtime == Runtime::Opencode && spec.single_file {
                // OpenCode is given plugin directories (their plugin modules): refused by name
                // rather than skipped, so a harness never runs without what it names.
                self.problem(
                    at,
                    &field,
                    format!(
                        "{}: runtime opencode takes plugin directories whose \
                         {{plugin,plugins}}/*.{{ts,js}} it imports, not a single file; put it \
                         in plugins/ of a directory",
                        spec.name
                    ),
                );
                continue;
            }
            if spec.single_file {
                if let Some(found) = self.plugin_file(h, spec, at, &field, out, progress) {
                    registered.push(found);
                }
                continue;
            }
            let class = match plugin_format::classify(&spec.host_path) {
                Ok(c) => c,
                Err(e) => {
                    self.problem(at, &field, e.to_string());
                    continue;
                }
            };
            let loaded = match (&class, h.runtime) {
                (PluginClass::Pi(pi), _) => {
                    if !spec.pi_args.is_empty() {
                        for (j, p) in
                            env_policy::pi_args_problems(&spec.pi_args, Some(&pi.registered_flags))
                        {
                            if matches!(p, env_policy::PiArgProblem::Unregistered { .. }) {
                                self.problem(at, format!("{field}.pi.args[{j}]"), p.to_string());
                            }
                        }
                    }
                    if h.runtime == Runtime::Pi {
                        registered.push(Registered {
                            at,
                            field: field.clone(),
                            flags: pi.registered_flags.clone(),
                            tools: pi.registered_tools.clone(),
                        });
                    }
                    h.runtime == Runtime::Pi
                }
                (PluginClass::Claude(_), _) => {
                    if !spec.env.is_empty() {
                        self.problem(
                            at,
                            format!("{field}.env"),
                            "a Claude plugin takes no env: (it would be silently dropped)",
                        );
                    }
                    if !spec.pi_args.is_empty() {
                        self.problem(
                            at,
                            format!("{field}.pi"),
                            "a Claude plugin takes no pi: options",
                        );
                    }
                    h.runtime == Runtime::Claude
                }
                (PluginClass::Codex(_), _) => {
                    if !spec.env.is_empty() || !spec.pi_args.is_empty() {
                        self.problem(
                            at,
                            &field,
                            "a Codex plugin takes no env: or pi: options (Codex would not see them)",
                        );
                    }
                    if h.runtime == Runtime::Codex
                        && !plugin_format::is_codex_plugin_name(&spec.name)
                    {
                        self.problem(
                            at,
                            &field,
                            format!(
                                "{:?}: Codex takes a plugin's upload name as its plugin name \
                                 (ASCII letters, digits, `-` and `_`); rename the directory",
                                spec.name
                            ),
                        );
                    }
                    h.runtime == Runtime::Codex
                }
                (PluginClass::Opencode(o), _) => {
                    if !spec.pi_args.is_empty() {
                        self.problem(
                            at,
                            format!("{field}.pi"),
                            "an OpenCode plugin takes no pi: options",
                        );
                    }
                    if h.runtime == Runtime::Opencode && !o.skipped.is_empty() {
                        self.note(
                            at,
                            &field,
                            format!(
                                "{}: OpenCode is given its plugin modules ({}) only; {} of the \
                                 tree are not loaded",
                                spec.name,
                                o.entries.join(", "),
                                o.skipped.join(", ")
                            ),
                        );
                    }
                    h.runtime == Runtime::Opencode
                }
            };
            if !loaded {
                self.note(
                    at,
                    &field,
                    format!(
                        "{} is a {} plugin: runtime {} names and skips it",
                        spec.name,
                        class.kind(),
                        h.runtime.as_str()
                    ),
                );
            }
            match self.tree_digest(&spec.host_path, progress) {
                Ok(digest) => {
                    if let Some(why) = over_upload_limits(&digest.listing, &h.upload_limits) {
                        self.problem(at, &field, format!("{}: {why}", spec.path));
                    }
                    let found = digest.listing.digest(TreeFormat::ContentV1);
                    if let Some(why) = pin_mismatch(spec.pin.as_deref(), &found) {
                        self.problem(at, &field, why);
                        continue;
                    }
                    out.plugins.push(CheckedPlugin {
                        spec: spec.clone(),
                        class,
                        digest,
                        loaded,
                    })
                }
                Err(e) => self.problem(at, &field, e.to_string()),
            }
        }
        self.registrations(h, node, &registered);
        let mut skill_names = BTreeSet::new();
        for (i, spec) in h.skills.iter().enumerate() {
            let at = item_loc("skills", i);
            if !skill_names.insert(spec.name.clone()) {
                self.problem(
                    at,
                    format!("skills[{i}]"),
                    format!("a second skills directory named {:?}", spec.name),
                );
            }
            if h.runtime == Runtime::Codex {
                self.problem(
                    at,
                    format!("skills[{i}]"),
                    format!(
                        "{}: runtime codex is given no skill yet (pitcrew turns off Codex's \
                         skill list, so none the repository or an earlier iteration brings \
                         reaches the model); remove it or use runtime pi or claude",
                        spec.name
                    ),
                );
            }
            if h.runtime == Runtime::Claude {
                if let Some(j) = h.plugins.iter().position(|p| {
                    !p.single_file
                        && claude_plugin_names(&p.host_path, &p.name).contains(&spec.name)
                }) {
                    self.problem(
                        at,
                        format!("skills[{i}]"),
                        format!(
                            "Claude Code is given the skill as a plugin named {:?}, the name of \
                             plugins[{j}]: it keeps one of two plugins of a name and offers the \
                             other's skill of that name in its place; rename the skills directory",
                            spec.name
                        ),
                    );
                }
            }
            match self.tree_digest(&spec.host_path, progress) {
                Ok(digest) => {
                    if let Some(why) = over_upload_limits(&digest.listing, &h.upload_limits) {
                        self.problem(at, format!("skills[{i}]"), format!("{}: {why}", spec.path));
                    }
                    // What the tree may hold: one skill, text only.
                    let found = skill_checks::check(
                        &spec.host_path,
                        &spec.path,
                        &digest.listing,
                        h.runtime,
                    );
                    for problem in found.problems {
                        self.problem(at, format!("skills[{i}]"), problem);
                    }
                    for note in found.notes {
                        self.note(at, format!("skills[{i}]"), note);
                    }
                    let found = digest.listing.digest(TreeFormat::ContentV1);
                    if let Some(why) = pin_mismatch(spec.pin.as_deref(), &found) {
                        self.problem(at, format!("skills[{i}]"), why);
                        continue;
                    }
                    out.skills.push(CheckedSkill {
                        spec: spec.clone(),
                        digest,
                    })
                }
                Err(e) => self.problem(at, format!("skills[{i}]"), e.to_string()),
            }
        }
        let mut adapter_names = BTreeMap::new();
        for (i, spec) in h.adapters.iter().enumerate() {
            let at = item_loc("adapters", i);
            let config = spec.role == PinRole::Config;
            let dest = (config, spec.destination());
            // Single-file plugins go into the adapters directory too.
            if let Some(j) = h
                .plugins
                .iter()
                .position(|p| p.single_file && p.name == dest.1)
            {
                if !config {
                    self.problem(
                        at,
                        format!("adapters[{i}]"),
                        format!("uploads under the same name {:?} as plugins[{j}]", dest.1),
                    );
                }
            }
            if let Some(first) = adapter_names.insert(dest.clone(), i) {
                self.problem(
                    at,
                    format!("adapters[{i}]"),
                    format!(
                        "uploads under the same name {:?} as adapters[{first}]",
                        dest.1
                    ),
                );
            }
            // A config file cannot also be a directory another one goes into (`to:`).
            if config {
                let clash = adapter_names.iter().find(|((other_config, other), _)| {
                    *other_config && (is_below(other, &dest.1) || is_below(&dest.1, other))
                });
                if let Some(((_, other), first)) = clash {
                    self.problem(
                        at,
                        format!("adapters[{i}]"),
                        format!(
                            "{:?} and {other:?} of adapters[{first}] would need the same path \
                             in the config directory as a file and as a directory",
                            dest.1
                        ),
                    );
                }
            }
            match tree_hash::sha256_file_watched(&spec.host_path, progress) {
                Ok(rec) => match pin_mismatch(spec.pin.as_deref(), &rec.sha256) {
                    Some(why) => self.problem(at, format!("adapters[{i}]"), why),
                    None => out.adapters.push(CheckedAdapter {
                        spec: spec.clone(),
                        sha256: rec.sha256,
                        size: rec.size,
                    }),
                },
                Err(e) => self.problem(at, format!("adapters[{i}]"), e.to_string()),
            }
        }
        // The workspace is one upload too: counted (not hashed), stopping past the limit.
        if let Some(work) = &h.workdir {
            let limits = &h.upload_limits;
            let size = crate::unpack::offer::host::tree_size(work, limits.max_entries + 1);
            if let Some(why) = over_limits(size.entries + 1, size.file_bytes, limits) {
                let at = top.and_then(|m| m.get_node("workdir")).and_then(location);
                self.problem(at, "workdir", format!("{}: {why}", work.display()));
            }
        }
    }
}

/// What a plugin pi loads registers (by the textual scan of its sources).
struct Registered {
    at: Option<Location>,
    /// `plugins[i]`.
    field: String,
    flags: Vec<String>,
    tools: Vec<String>,
}

impl Checker<'_> {
    /// What the plugins pi loads register, checked together: a tool or flag two of them
    /// register makes pi refuse to load the second (`Tool "x" conflicts with ...`, exit 1 in
    /// every supported release), refused here naming both; and the tools `agent.tools` does not
    /// name, which pitcrew adds to pi's `--tools` allowlist, named in a note.
    fn registrations(&mut self, h: &Harness, node: &Node, registered: &[Registered]) {
        let mut owners: BTreeMap<(&str, &str), &str> = BTreeMap::new();
        for reg in registered {
            let flags = reg.flags.iter().map(|f| ("flag", f.as_str()));
            let tools = reg.tools.iter().map(|t| ("tool", t.as_str()));
            for (kind, name) in flags.chain(tools) {
                match owners.get(&(kind, name)) {
                    Some(first) => self.problem(
                        reg.at,
                        &reg.field,
                        format!(
                            "registers the {kind} {name:?} that {first} registers too: pi refuses \
                             to load the second extension ({} {name:?} conflicts with ...) and \
                             the iteration fails; keep it in one plugin",
                            if kind == "tool" { "Tool" } else { "Flag" }
                        ),
                    ),
                    None => {
                        owners.insert((kind, name), &reg.field);
                    }
                }
            }
        }
        let Some(list) = h.agent.tools.as_ref().filter(|t| !t.is_empty()) else {
            return;
        };
        let builtin = |t: &str| crate::runtime_argv::PI_BUILTIN_TOOLS.contains(&t);
        let mut added: Vec<String> = Vec::new();
        let mut builtins: Vec<String> = Vec::new();
        for reg in registered {
            let tools: Vec<&str> = reg
                .tools
                .iter()
                .filter(|t| !list.contains(t))
                .map(String::as_str)
                .collect();
            let (named, own): (Vec<&str>, Vec<&str>) = tools.iter().partition(|t| builtin(t));
            if !own.is_empty() {
                added.push(format!("{} ({})", own.join(", "), reg.field));
            }
            if !named.is_empty() {
                builtins.push(format!("{} ({})", named.join(", "), reg.field));
            }
        }
        // Where `agent.tools` is in the harness, for the notes below.
        let at = node
            .as_mapping()
            .and_then(|m| m.get_node("agent"))
            .and_then(Node::as_mapping)
            .and_then(|m| m.get_node("tools"))
            .and_then(location);
        if !builtins.is_empty() {
            self.note(
                at,
                "agent.tools",
                format!(
                    "{} is a name of pi's built-in tools, which only agent.tools gives: not \
                     added to --tools (pi would offer its own tool of that name if the \
                     extension did not register it); name it in agent.tools to offer it",
                    builtins.join("; ")
                ),
            );
        }
        if added.is_empty() {
            return;
        }
        self.note(
            at,
            "agent.tools",
            format!(
                "pi's --tools allowlist filters extension tools too: pitcrew adds the tools the \
                 verified extensions register to it: {}",
                added.join("; ")
            ),
        );
    }

    /// Checks a single-file plugin (`plugins: [ext/hello.ts]`): a pi extension file whose
    /// imports stay inside itself, pinned by its bytes; Claude Code names and skips it. What it
    /// registers when pi loads it.
    fn plugin_file(
        &mut self,
        h: &Harness,
        spec: &PluginSpec,
        at: Option<Location>,
        field: &str,
        out: &mut Validated,
        progress: Option<&HashProgress>,
    ) -> Option<Registered> {
        let scan = match plugin_format::check_single_file(&spec.host_path) {
            Ok(scan) => scan,
            Err(e) => {
                self.problem(at, field, e.to_string());
                return None;
            }
        };
        for why in scan.problems {
            self.problem(at, field, format!("{}: {why}", spec.path));
        }
        let loaded = h.runtime == Runtime::Pi;
        if loaded {
            for (j, p) in env_policy::pi_args_problems(&spec.pi_args, Some(&scan.registered_flags))
            {
                if matches!(p, env_policy::PiArgProblem::Unregistered { .. }) {
                    self.problem(at, format!("{field}.pi.args[{j}]"), p.to_string());
                }
            }
        } else {
            self.note(
                at,
                field,
                format!(
                    "{} is a single-file pi extension: runtime {} names and skips it",
                    spec.name,
                    h.runtime.as_str()
                ),
            );
        }
        match tree_hash::sha256_file_watched(&spec.host_path, progress) {
            Ok(rec) => match pin_mismatch(spec.pin.as_deref(), &rec.sha256) {
                Some(why) => self.problem(at, field, why),
                None => out.plugin_files.push(CheckedPluginFile {
                    spec: spec.clone(),
                    sha256: rec.sha256,
                    size: rec.size,
                    loaded,
                }),
            },
            Err(e) => self.problem(at, field, e.to_string()),
        }
        loaded.then(|| Registered {
            at,
            field: field.to_string(),
            flags: scan.registered_flags,
            tools: scan.registered_tools,
        })
    }
}

/// Why a remote entry's copy must not be used, if it must not: the listing the manifest pins
/// must hash to the entry's pin. The listing a resolver verified does by construction; a copy
/// read here (a resolver that gave no listing, or a file) that changed after the resolver's
/// check is caught, not uploaded.
fn pin_mismatch(pin: Option<&str>, found: &str) -> Option<String> {
    let pin = pin?;
    (pin != found).then(|| {
        format!(
            "the fetched copy changed while it was checked: it hashes to sha256={found}, not to \
             its pin sha256={pin}"
        )
    })
}

/// Whether the relative path `path` lies strictly below the relative path `dir`.
fn is_below(path: &str, dir: &str) -> bool {
    path.strip_prefix(dir)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// Where `program` is found: a name with a `/` relative to `base` (or absolute), a bare name on
/// the absolute entries of `path` (a `PATH` value) by the supervisor's own rule
/// ([`crate::verify::resolve_agent_binary`]); it must be an executable file. `Err` says what
/// was looked at.
pub fn find_program(
    program: &str,
    base: &Path,
    path: Option<&std::ffi::OsStr>,
) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt as _;
    if program.contains('/') {
        let p = base.join(program);
        let executable =
            std::fs::metadata(&p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        return if executable {
            Ok(p)
        } else if p.exists() {
            Err(format!("{} is not an executable file", p.display()))
        } else {
            Err(format!("{} does not exist", p.display()))
        };
    }
    let path = path
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    crate::verify::resolve_agent_binary(program, &path)
        .map_err(|_| format!("{program} is not an executable file in any PATH directory ({path})"))
}

/// The names Claude Code may know the plugin tree at `dir` by: its directory's (`dir_name`) and
/// the `name` of its `.claude-plugin/plugin.json`, when it has one.
fn claude_plugin_names(dir: &Path, dir_name: &str) -> Vec<String> {
    let mut names = vec![dir_name.to_string()];
    let manifest = std::fs::read(dir.join(".claude-plugin/plugin.json"))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok());
    if let Some(name) = manifest.as_ref().and_then(|m| m["name"].as_str()) {
        names.push(name.to_string());
    }
    names
}
