//! The argv each runtime needs (design section 8) (provisional API; the implementation lands
//! from the `steps` branch).
#![allow(missing_docs)]
use crate::manifest::Manifest;
use std::path::Path;

/// The full argv (argv[0] = the resolved binary) for the manifest's runtime.
pub fn argv(manifest: &Manifest, binary: &Path) -> Vec<String> {
    let mut v = vec![binary.display().to_string()];
    v.extend(manifest.agent.args.iter().cloned());
    v
}
