//! Step 3 of an iteration: build the agent's environment from scratch (provisional API; the
//! implementation lands from the `steps` branch).
#![allow(missing_docs, unused_variables)]
use crate::manifest::Manifest;
use serde::{Deserialize, Serialize};

/// The environment to launch with, and what was removed (names only, never values).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvOutcome {
    pub env: Vec<(String, String)>,
    pub removed: Vec<serde_json::Value>,
    pub dotenv_refused: Vec<serde_json::Value>,
}

/// Why the environment could not be built (exit 125).
#[derive(Debug, thiserror::Error)]
#[error("environment: {0}")]
pub struct EnvError(pub String);

/// Builds the environment: baseline, `.env` as data, deny rules, runner pins, plugin env.
pub fn build(manifest: &Manifest, baseline: &[(String, String)]) -> Result<EnvOutcome, EnvError> {
    Ok(EnvOutcome {
        env: baseline.to_vec(),
        ..EnvOutcome::default()
    })
}
