//! Compiling a clean harness for one sandbox: the [`Manifest`] the supervisor verifies against,
//! with every expected digest computed from the host's own copies, and the [`Upload`]s that put
//! those copies where the manifest pins them. Both come out of one pass over the checked
//! entries, so every pinned tree and file has exactly one upload to its pinned path.

use super::layout::SandboxLayout;
use super::model::Validated;
use crate::exit_code::PinRole;
use crate::manifest::{
    Agent, ContextFiles, EnvSpec, FileListing, FilePin, FileUse, Limits, Manifest, Runtime,
    RuntimeDirs, TreeKind, TreePin, MANIFEST_VERSION,
};
use crate::plugin_format::PluginClass;
use crate::protocol::Owner;
use crate::tree_hash::{TreeDigest, TreeFormat};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What an upload carries: a pinned tree (plugin, skills), a pinned file (adapter) or the
/// agent's workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadKind {
    /// A plugin directory, pinned as a tree.
    PluginTree,
    /// A skills directory, pinned as a tree.
    SkillTree,
    /// An adapter or a single-file plugin, a single pinned file (its sandbox path names the
    /// file itself).
    AdapterFile,
    /// The agent's workspace directory (not pinned: the agent works in it).
    Workspace,
}

/// One host path and where it goes inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    /// What it is.
    pub kind: UploadKind,
    /// The host's copy: a directory for trees and the workspace, a file for adapters.
    pub host_path: PathBuf,
    /// Its absolute path inside the sandbox (the pinned path for trees and adapters).
    pub sandbox_path: String,
    /// Who owns it inside the sandbox: the agent's user for the workspace; `None` (the
    /// supervisor's own, not writable by the agent) for everything pinned.
    pub owner: Option<Owner>,
    /// A pinned tree's digest with the listing validation walked it for: its upload's offer
    /// listing is made from it, so the tree is read once per run (`None`: the workspace, walked
    /// when it is uploaded, and adapter files).
    pub digest: Option<std::sync::Arc<TreeDigest>>,
}

/// A harness compiled for one sandbox: what the supervisor verifies and what to upload first.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The manifest for the supervisor.
    pub manifest: Manifest,
    /// Every upload, in order: plugin trees, skills trees, adapter files, then the workspace.
    pub uploads: Vec<Upload>,
}

impl Validated {
    /// The manifest for a clean harness, with sandbox paths from `layout`. `None` if the
    /// harness had problems.
    pub fn manifest(&self, layout: &SandboxLayout) -> Option<Manifest> {
        self.compile(layout).map(|c| c.manifest)
    }

    /// The manifest for a clean harness and the uploads that go with it, with sandbox paths
    /// from `layout`. `None` if the harness had problems.
    pub fn compile(&self, layout: &SandboxLayout) -> Option<Compiled> {
        if !self.is_ok() {
            return None;
        }
        let h = self.harness.as_ref()?;
        let mut uploads = Vec::new();
        let mut pinned =
            |kind, host_path: &PathBuf, sandbox_path: &str, digest: Option<&TreeDigest>| {
                uploads.push(Upload {
                    kind,
                    host_path: host_path.clone(),
                    sandbox_path: sandbox_path.to_string(),
                    owner: None,
                    digest: digest.map(|d| std::sync::Arc::new(d.clone())),
                });
            };
        let mut trees = Vec::new();
        for p in &self.plugins {
            let (kind, entries) = match &p.class {
                PluginClass::Pi(pi) => (TreeKind::PiExtension, pi.entries.clone()),
                PluginClass::Claude(_) => (TreeKind::ClaudePlugin, Vec::new()),
                PluginClass::Codex(_) => (TreeKind::CodexPlugin, Vec::new()),
                PluginClass::Opencode(o) => (TreeKind::OpencodePlugin, o.entries.clone()),
            };
            // A plugin the runtime does not load is still uploaded and verified (it is part of
            // the harness), but it is data for this runtime.
            let kind = if p.loaded { kind } else { TreeKind::Data };
            let path = layout.plugin(&p.spec.name);
            pinned(
                UploadKind::PluginTree,
                &p.spec.host_path,
                &path,
                Some(&p.digest),
            );
            trees.push(TreePin {
                name: p.spec.name.clone(),
                path,
                role: PinRole::Plugin,
                kind,
                format: TreeFormat::PiTreeV1,
                sha256: p.digest.sha256.clone(),
                files: FileListing::from_records(&p.digest.listing.files).ok()?,
                dirs: p.digest.listing.dirs.clone(),
                stored: None,
                entries: if matches!(kind, TreeKind::PiExtension | TreeKind::OpencodePlugin) {
                    entries
                } else {
                    Vec::new()
                },
                env: p.spec.env.clone(),
                pi_args: p.spec.pi_args.clone(),
            });
        }
        for s in &self.skills {
            let path = layout.skill(&s.spec.name);
            pinned(
                UploadKind::SkillTree,
                &s.spec.host_path,
                &path,
                Some(&s.digest),
            );
            trees.push(TreePin {
                name: format!("skill:{}", s.spec.name),
                path,
                role: PinRole::Skill,
                kind: TreeKind::Data,
                format: TreeFormat::PiTreeV1,
                sha256: s.digest.sha256.clone(),
                files: FileListing::from_records(&s.digest.listing.files).ok()?,
                dirs: s.digest.listing.dirs.clone(),
                stored: None,
                entries: Vec::new(),
                env: BTreeMap::new(),
                pi_args: Vec::new(),
            });
        }
        let mut files = Vec::new();
        for a in &self.adapters {
            let path = layout.adapter(a.spec.role, &a.spec.destination());
            pinned(UploadKind::AdapterFile, &a.spec.host_path, &path, None);
            files.push(FilePin {
                path,
                role: a.spec.role,
                sha256: a.sha256.clone(),
                size: Some(a.size),
                usage: a.spec.usage,
                env: BTreeMap::new(),
                pi_args: Vec::new(),
            });
        }
        // Single-file plugins after the adapters (pi runs `tool_call` handlers in `-e` order:
        // the hook adapters stay first), uploaded with them and pinned by their bytes. One the
        // runtime does not load is still uploaded and verified, as data.
        for p in &self.plugin_files {
            let path = layout.adapter(PinRole::Plugin, &p.spec.name);
            pinned(UploadKind::AdapterFile, &p.spec.host_path, &path, None);
            files.push(FilePin {
                path,
                role: PinRole::Plugin,
                sha256: p.sha256.clone(),
                size: Some(p.size),
                usage: if p.loaded {
                    FileUse::PiExtension
                } else {
                    FileUse::Verify
                },
                env: if p.loaded {
                    p.spec.env.clone()
                } else {
                    BTreeMap::new()
                },
                pi_args: if p.loaded {
                    p.spec.pi_args.clone()
                } else {
                    Vec::new()
                },
            });
        }
        let binary = h.agent_program();
        let args = match h.runtime {
            Runtime::Command => h.command.iter().skip(1).cloned().collect(),
            _ => h.agent.args.clone(),
        };
        let config = layout.config_dir();
        let manifest = Manifest {
            version: MANIFEST_VERSION,
            runtime: h.runtime,
            agent: Agent {
                binary,
                sha256: None,
                args,
                model: h.agent.model.clone(),
                tools: h.agent.tools.clone(),
                claude_agent: h.agent.claude_agent.clone(),
                record_prompt: h.agent.record_prompt,
                // The harness's default: the context files the run's workspace began with.
                context_files: match h.runtime {
                    Runtime::Command => ContextFiles::AsIs,
                    Runtime::Pi | Runtime::Claude | Runtime::Codex | Runtime::Opencode => {
                        h.agent.context_files.unwrap_or(ContextFiles::Uploaded)
                    }
                },
            },
            prompt: h.prompt.clone(),
            trees,
            files,
            env: EnvSpec {
                dotenv: h.dotenv.as_ref().map(|p| {
                    if p.starts_with('/') {
                        p.clone()
                    } else {
                        format!("{}/{p}", layout.workdir())
                    }
                }),
                set: h.env.clone(),
                passed: Vec::new(),
                runner: BTreeMap::new(),
            },
            workdir: layout.workdir(),
            dirs: RuntimeDirs {
                home: Some(layout.home()),
                tmp: Some(layout.tmp()),
                sessions: (h.runtime == Runtime::Pi).then(|| format!("{config}/sessions")),
                config: Some(config),
                home_keep: h.keep_home.clone(),
            },
            user: Default::default(),
            output: crate::manifest::OutputSpec {
                keep_output: h.keep_output,
                ..Default::default()
            },
            limits: Limits {
                timeout_ms: u64::try_from(h.timeout.as_millis()).unwrap_or(u64::MAX),
                processes: h.processes,
                memory_bytes: h.memory,
                disk_bytes: h.disk,
                ..Limits::default()
            },
            confinement: Default::default(),
            // The harness's `network:`, or the runtime's default (its model endpoint).
            network: Some(
                h.network
                    .clone()
                    .unwrap_or_else(|| super::network::network_default(h, &self.pi_config).policy),
            ),
            retention: h.retention.clone(),
            // Set by `pitcrew run` when model credentials stay on the host.
            model: None,
        };
        // The workspace is the agent's: owned by the identity the manifest runs it as.
        if let Some(work) = &h.workdir {
            uploads.push(Upload {
                kind: UploadKind::Workspace,
                host_path: work.clone(),
                sandbox_path: manifest.workdir.clone(),
                owner: Some(Owner {
                    uid: manifest.user.uid,
                    gid: manifest.user.gid,
                }),
                digest: None,
            });
        }
        Some(Compiled { manifest, uploads })
    }
}

/// Room a `set_manifest` request takes around the manifest itself.
const ENVELOPE: usize = 128;

/// Why `manifest` could not be sent in one `set_manifest` control frame, if it could not. With
/// `listings_inline` (a supervisor without the feature `manifest.listings`) its trees list every
/// file and directory, so a tree of a few hundred thousand files makes a manifest over
/// [`MAX_CONTROL_PAYLOAD`](crate::protocol::MAX_CONTROL_PAYLOAD); otherwise the listings travel
/// in `add_listing` requests of their own and only the rest of the manifest counts.
pub fn too_big_to_send(manifest: &Manifest, listings_inline: bool) -> Option<String> {
    let bytes = if listings_inline {
        serde_json::to_vec(manifest).map_or(usize::MAX, |v| v.len())
    } else {
        serde_json::to_vec(&manifest.without_listings()).map_or(usize::MAX, |v| v.len())
    };
    let max = crate::protocol::MAX_CONTROL_PAYLOAD;
    (bytes.saturating_add(ENVELOPE) > max).then(|| {
        if listings_inline {
            format!(
                "the manifest is {bytes} bytes (its trees list every file and directory), over \
                 the {max} bytes one set_manifest request may hold for a supervisor without the \
                 feature manifest.listings: fewer or smaller trees, or a newer pitcrew-init"
            )
        } else {
            format!(
                "the manifest is {bytes} bytes without its trees' listings, over the {max} bytes \
                 one set_manifest request may hold"
            )
        }
    })
}

impl super::model::Harness {
    /// The program the agent runs as: `command[0]`, or `agent.binary`, or the runtime's
    /// default (`pi`, `claude`); empty when there is none.
    pub fn agent_program(&self) -> String {
        match self.runtime {
            Runtime::Command => self.command.first().cloned().unwrap_or_default(),
            rt => self
                .agent
                .binary
                .clone()
                .or_else(|| rt.default_binary().map(str::to_string))
                .unwrap_or_default(),
        }
    }
}
