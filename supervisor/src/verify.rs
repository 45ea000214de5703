//! Step 2 of an iteration: verify every tree and pinned file of the manifest (provisional API;
//! the implementation lands from the `steps` branch).
#![allow(missing_docs, unused_variables)]
use crate::manifest::Manifest;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What verification found: one entry per tree and file, plus the resolved agent binary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    pub trees: Vec<serde_json::Value>,
    pub files: Vec<serde_json::Value>,
    pub agent_binary: Option<String>,
    pub duration_ms: u64,
}

/// A verification failure: the iteration exit code and a machine-readable reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyFailure {
    pub exit_code: i32,
    pub reason: String,
}

impl VerifyReport {
    /// The failure that decides the iteration's exit code, if any.
    pub fn failure(&self) -> Option<VerifyFailure> {
        None
    }
}

/// Verifies the manifest's trees and files and resolves the agent binary on `path_var`.
pub fn verify(manifest: &Manifest, path_var: &str) -> VerifyReport {
    VerifyReport::default()
}

/// Resolves the agent binary once to an absolute path (127/126 failures).
pub fn resolve_agent_binary(binary: &str, path_var: &str) -> Result<PathBuf, VerifyFailure> {
    Ok(PathBuf::from(binary))
}
