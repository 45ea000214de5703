//! Where uploads go inside the sandbox: one root (`/pitcrew` unless the engine says otherwise)
//! with fixed places below it for plugins, skills, adapters, the runtime config, the agent's
//! workspace, home and tmp.

use crate::exit_code::PinRole;

/// Where things go inside the sandbox (all absolute).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxLayout {
    /// The root under which pitcrew places uploads (`/pitcrew`).
    pub root: String,
}

impl Default for SandboxLayout {
    fn default() -> Self {
        SandboxLayout {
            root: "/pitcrew".to_string(),
        }
    }
}

impl SandboxLayout {
    /// Where a plugin tree is uploaded.
    pub fn plugin(&self, name: &str) -> String {
        format!("{}/plugins/{name}", self.root)
    }
    /// Where a skills tree is uploaded.
    pub fn skill(&self, name: &str) -> String {
        format!("{}/skills/{name}", self.root)
    }
    /// Where an adapter is uploaded: a config file into the runtime config dir, at `name`
    /// (its file name, or the relative path its `to:` gives: `agents/reviewer.md`); the others
    /// under their file name in the adapters dir.
    pub fn adapter(&self, role: PinRole, name: &str) -> String {
        match role {
            PinRole::Config => format!("{}/{name}", self.config_dir()),
            _ => format!("{}/adapters/{name}", self.root),
        }
    }
    /// The agent's workspace.
    pub fn workdir(&self) -> String {
        format!("{}/workspace", self.root)
    }
    /// The runtime config dir (pi agent dir, Claude config dir).
    pub fn config_dir(&self) -> String {
        format!("{}/config", self.root)
    }
    /// The agent's home.
    pub fn home(&self) -> String {
        format!("{}/home", self.root)
    }
    /// The agent's tmp.
    pub fn tmp(&self) -> String {
        format!("{}/tmp", self.root)
    }
}
