//! The rules both pitcrew binaries share, defined once.
//!
//! - `atomic_file` (Unix): the one atomic write (a temporary file created exclusively beside
//!   the target, synced, renamed; removed on failure).
//! - [`tree_hash`]: `pi-tree-v1` and `content-v1` tree digests and single-file SHA-256, walked
//!   without following symlinks.
//! - [`plugin_format`]: which runtime loads a plugin directory (Claude plugin or pi extension) and
//!   which entry files pi would load.
//! - [`env_policy`]: the deny-lists and reserved names for environment variables, and the rules
//!   for `pi.args`.
//! - `bounded_tree` (Unix): walks and removals of agent-written trees in bounded descriptors
//!   and memory at any depth, never following a link or leaving the tree.
//! - `claude_settings` (Linux): before each launch of Claude Code, the `--settings` derived from
//!   a pinned `claude-settings` file's verified bytes (hooks kept on, built-in plugins off).
//! - `claude_skills` (Linux): before each launch of Claude Code, the plugin directory of each
//!   skills tree, holding only the skill's derived `SKILL.md`.
//! - `dir_reset` (Unix): before each iteration, the runtime's config directory brought back to
//!   the pinned files, `HOME`, `TMPDIR` and the workspace's `output/` emptied.
//! - [`dotenv`]: the sandbox `.env` file parsed as data, never executed.
//! - [`egress`]: what pitcrew reads of the connections it carries out of the sandbox (a TLS
//!   ClientHello's server name).
//! - [`manifest`]: the versioned document the host hands the supervisor.
//! - [`exit_code`]: what each iteration exit code means.
//! - [`git_config`]: a git configuration file read as data and written back with only the keys
//!   that run nothing (a collected workspace's repositories).
//! - [`protocol`]: framing and messages between the host and the supervisor.
//! - [`result`]: the result record of an iteration.
//! - `record` (Unix): the record step, the result record written where its mode keeps it
//!   (`run`'s `--result`/`--result-fd`, `serve`'s record directory).
//! - [`record_names`]: the names in a records directory (`iteration-N`, `.collected`), read
//!   by one rule on both sides.
//! - `unpack` (Unix): safe unpacking of an uploaded or collected tar stream.
//! - [`user_namespace`]: the user namespace the supervisor runs in (rootless sandboxes).
//! - [`judge`]: whether an agent that exited 0 reported a failure in its JSON stream.
//! - [`usage`]: the tokens and cost the runtime reported in its JSON stream.
//! - [`runtime_version`]: which pi or Claude Code release the agent binary is (its npm
//!   package), and what that release does.
//! - [`skill_md`]: what a skills tree may hold, and the `SKILL.md` Claude Code is given (a
//!   skill is text: nothing of its tree runs).
//! - [`workspace_config`]: runtime configuration read from the workspace that no flag switches
//!   off (reported per iteration).
//! - `context_files` (Linux): the context files the runtime reads (`AGENTS.md`, `CLAUDE.md`),
//!   named per iteration and, for `agent.context_files: uploaded`, set back to the run's
//!   baseline before launch.
//! - `iteration` (Linux): the seven steps of one iteration, in order.
//! - `agent_dirs` (Linux): the agent's directories, made present and agent-owned before each
//!   iteration without following a symlink.
//! - `claude_user_settings` (Linux): Claude Code's user settings file made root's and
//!   read-only before each launch, in a config dir whose sticky bit keeps it so.
//! - `home_guard` (Linux): Node's global module folders in `HOME` made root's empty
//!   directories before each launch, in a `HOME` whose sticky bit keeps them so.
//! - `codex_config` (Linux): Codex's hooks, configuration and instructions in `CODEX_HOME` made
//!   root's and read-only before each launch (a sub-agent reads them again when spawned).
//! - `opencode_config` (Linux): the configuration pitcrew gives OpenCode
//!   (`OPENCODE_CONFIG_CONTENT`), and its config dirs made root's before each launch.
//! - `pi_config` (Linux): pi's credentials, catalogs and settings in its config dir made root's
//!   and read-only before each launch, in a config dir whose sticky bit keeps them so (pi
//!   0.87.1 and 1.6.0 read `auth.json` there again while they run).
//! - `pi_model_route`: pi's built-in provider pointed at the supervisor's model listener by a
//!   `models.json` of the supervisor's, so that its key stays on the host.
//! - `model_http` (feature `host`): the model requests the host carries, each credential's
//!   placeholder replaced by its value.
//! - `root_guard` (Linux): the root-owned, read-only stand-ins both of those put in place.
//! - `codex_system` (Unix): the Codex CLI's `/etc/codex` files, refused when the agent could
//!   write them.
//! - `server` (Linux): the long-lived mode (`serve`, `attach`): the control protocol server.
//! - `sandbox` (Linux): the process side (signals, reaping, confinement, launch, supervision).
//! - `harness` (feature `harness`): the YAML harness file and its validation.

#[cfg(target_os = "linux")]
pub mod agent_dirs;
#[cfg(unix)]
pub mod atomic_file;
#[cfg(unix)]
pub mod bounded_tree;
#[cfg(target_os = "linux")]
pub mod claude_managed;
#[cfg(target_os = "linux")]
pub mod claude_settings;
#[cfg(target_os = "linux")]
pub mod claude_skills;
#[cfg(target_os = "linux")]
pub mod claude_user_settings;
pub mod clock;
#[cfg(target_os = "linux")]
pub mod codex_config;
#[cfg(unix)]
pub mod codex_system;
#[cfg(target_os = "linux")]
pub mod context_files;
#[cfg(unix)]
pub mod dir_reset;
pub mod dotenv;
pub mod egress;
pub mod env_policy;
pub mod environment;
pub mod exit_code;
pub mod git_config;
#[cfg(feature = "harness")]
pub mod harness;
pub mod hash_command;
#[cfg(target_os = "linux")]
pub mod home_guard;
#[cfg(target_os = "linux")]
pub mod iteration;
pub mod judge;
pub mod logging;
pub mod manifest;
#[cfg(feature = "host")]
pub mod model_http;
#[cfg(target_os = "linux")]
pub mod opencode_config;
#[cfg(target_os = "linux")]
pub mod pi_config;
#[cfg(unix)]
pub mod pi_model_route;
pub mod plugin_format;
pub mod protocol;
#[cfg(unix)]
pub mod record;
pub mod record_names;
pub mod result;
#[cfg(target_os = "linux")]
pub mod root_guard;
pub mod runtime_argv;
pub mod runtime_version;
#[cfg(target_os = "linux")]
pub mod sandbox;
#[cfg(target_os = "linux")]
pub mod server;
pub mod skill_md;
pub mod tree_hash;
#[cfg(unix)]
pub mod unpack;
pub mod usage;
pub mod user_namespace;
pub mod verify;
pub mod workspace_config;
