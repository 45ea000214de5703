//! Exit codes of an iteration and what each one means (`docs/result-record.md` lists them).
//!
//! Codes 93–98 and 125–127 are compatible with the shell preflights that runners use today, so a
//! runner that already maps them keeps working when pitcrew replaces the shell.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Agent binary not found, or not an absolute, verified path.
pub const AGENT_NOT_FOUND: i32 = 127;
/// Agent binary found but could not be executed.
pub const AGENT_NOT_EXECUTABLE: i32 = 126;
/// The supervisor itself failed: bad manifest, confinement could not be applied, internal error.
pub const SUPERVISOR_FAILED: i32 = 125;
/// A runtime config file (pi `models.json`/`auth.json`, Claude settings) differs.
pub const CONFIG_DRIFT: i32 = 98;
/// The hook adapter, hook scripts or hooks config differ or are missing.
pub const HOOK_ADAPTER_DRIFT: i32 = 97;
/// A plugin/extension (or skills) tree is missing or its tree hash differs.
pub const PLUGIN_DRIFT: i32 = 96;
/// The runtime manifest file differs.
pub const RUNTIME_MANIFEST_DRIFT: i32 = 95;
/// The sub-agent adapter file differs.
pub const SUB_AGENT_DRIFT: i32 = 94;
/// The edit-repair adapter file differs.
pub const EDIT_REPAIR_DRIFT: i32 = 93;

/// What a pinned file or verified tree is for; the role decides the exit code when it drifts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PinRole {
    /// A plugin or extension tree (exit 96).
    Plugin,
    /// A skills tree (exit 96: skills are loaded like plugins).
    Skill,
    /// The sandbox hook adapter, a hook script or the hooks config (exit 97).
    HookAdapter,
    /// The runtime manifest file handed to the hook adapter (exit 95).
    RuntimeManifest,
    /// The sub-agent adapter (exit 94).
    SubAgent,
    /// The edit-repair adapter (exit 93).
    EditRepair,
    /// A runtime config file such as pi `models.json` or Claude `settings.json` (exit 98).
    Config,
}

impl PinRole {
    /// Every role, in a stable order (for help texts and docs).
    pub const ALL: [PinRole; 7] = [
        PinRole::Plugin,
        PinRole::Skill,
        PinRole::HookAdapter,
        PinRole::RuntimeManifest,
        PinRole::SubAgent,
        PinRole::EditRepair,
        PinRole::Config,
    ];

    /// The iteration exit code when something with this role is missing or differs.
    pub fn exit_code(self) -> i32 {
        match self {
            PinRole::Plugin | PinRole::Skill => PLUGIN_DRIFT,
            PinRole::HookAdapter => HOOK_ADAPTER_DRIFT,
            PinRole::RuntimeManifest => RUNTIME_MANIFEST_DRIFT,
            PinRole::SubAgent => SUB_AGENT_DRIFT,
            PinRole::EditRepair => EDIT_REPAIR_DRIFT,
            PinRole::Config => CONFIG_DRIFT,
        }
    }

    /// The name used in harness files and manifests (`hook-adapter`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            PinRole::Plugin => "plugin",
            PinRole::Skill => "skill",
            PinRole::HookAdapter => "hook-adapter",
            PinRole::RuntimeManifest => "runtime-manifest",
            PinRole::SubAgent => "sub-agent",
            PinRole::EditRepair => "edit-repair",
            PinRole::Config => "config",
        }
    }

    /// Parses the name used in harness files.
    pub fn parse(name: &str) -> Option<PinRole> {
        PinRole::ALL.into_iter().find(|r| r.as_str() == name)
    }
}

impl fmt::Display for PinRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A one-line explanation of an iteration exit code, for summaries and result records.
pub fn meaning(code: i32) -> String {
    match code {
        0 => "success".to_string(),
        AGENT_NOT_FOUND => "agent binary not found or not an absolute, verified path".to_string(),
        AGENT_NOT_EXECUTABLE => "agent binary found but could not be executed".to_string(),
        SUPERVISOR_FAILED => "the supervisor failed (see reason)".to_string(),
        CONFIG_DRIFT => "a runtime config file differs".to_string(),
        HOOK_ADAPTER_DRIFT => "the hook adapter, hook scripts or hooks config differ".to_string(),
        PLUGIN_DRIFT => "a plugin or skills tree is missing or its hash differs".to_string(),
        RUNTIME_MANIFEST_DRIFT => "the runtime manifest file differs".to_string(),
        SUB_AGENT_DRIFT => "the sub-agent adapter differs".to_string(),
        EDIT_REPAIR_DRIFT => "the edit-repair adapter differs".to_string(),
        c if (129..=192).contains(&c) => format!("agent killed by {}", signal_name(c - 128)),
        c => format!("agent exited {c}"),
    }
}

/// The conventional name of a signal number (`SIGTERM`), or `signal N` for unnamed ones.
pub fn signal_name(signo: i32) -> String {
    const NAMES: [&str; 32] = [
        "",
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    match usize::try_from(signo).ok().and_then(|i| NAMES.get(i)) {
        Some(name) if !name.is_empty() => (*name).to_string(),
        _ => format!("signal {signo}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_round_trip_and_map_to_compatible_codes() {
        for role in PinRole::ALL {
            assert_eq!(PinRole::parse(role.as_str()), Some(role));
            let json = serde_json::to_string(&role).unwrap();
            assert_eq!(json, format!("\"{}\"", role.as_str()));
        }
        assert_eq!(PinRole::Plugin.exit_code(), 96);
        assert_eq!(PinRole::HookAdapter.exit_code(), 97);
        assert_eq!(PinRole::Config.exit_code(), 98);
        assert_eq!(PinRole::RuntimeManifest.exit_code(), 95);
        assert_eq!(PinRole::SubAgent.exit_code(), 94);
        assert_eq!(PinRole::EditRepair.exit_code(), 93);
        assert_eq!(PinRole::parse("nope"), None);
    }

    #[test]
    fn meanings_name_signals_and_plain_codes() {
        assert_eq!(meaning(143), "agent killed by SIGTERM");
        assert_eq!(meaning(137), "agent killed by SIGKILL");
        assert_eq!(meaning(3), "agent exited 3");
        assert_eq!(signal_name(40), "signal 40");
        assert!(meaning(96).contains("plugin"));
    }
}
