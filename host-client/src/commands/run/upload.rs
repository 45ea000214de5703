//! Putting a compiled harness into the sandbox before the manifest is set: each plugin and
//! skills tree to its pinned path, the adapters (one small tar per destination directory), then
//! the workspace, owned by the agent. What goes where comes from the harness's [`Upload`] list.

use super::progress::Progress;
use crate::engine::Connection;
use crate::tarball;
use anyhow::Context as _;
use pitcrew_core::harness::{Upload, UploadKind};
use std::collections::BTreeMap;
use std::path::Path;

/// Uploads plugins, skills, adapters (one small tar per destination directory) and the
/// workspace (owned by the agent).
pub(super) fn upload_all(
    conn: &mut Connection,
    uploads: &[Upload],
    progress: &Progress,
) -> anyhow::Result<()> {
    let of_kind = |kind: fn(UploadKind) -> bool| uploads.iter().filter(move |u| kind(u.kind));
    for u in of_kind(|k| matches!(k, UploadKind::PluginTree | UploadKind::SkillTree)) {
        let (host, dest) = (&u.host_path, &u.sandbox_path);
        progress.status(&format!("uploading {} → {dest}", host.display()));
        conn.client()
            .upload(dest, u.owner, |w| tarball::write_tree(w, host))
            .map_err(|e| conn.explain(e))?;
    }
    // Adapters: each destination directory receives one tar with its files (pinned files, like
    // pinned trees, are the supervisor's: no owner).
    let mut by_dir: BTreeMap<String, Vec<(String, &Path)>> = BTreeMap::new();
    for u in of_kind(|k| k == UploadKind::AdapterFile) {
        let (dir, name) = u
            .sandbox_path
            .rsplit_once('/')
            .with_context(|| format!("adapter destination {} has no directory", u.sandbox_path))?;
        by_dir
            .entry(dir.to_string())
            .or_default()
            .push((name.to_string(), &u.host_path));
    }
    for (dir, files) in &by_dir {
        progress.status(&format!(
            "uploading {} adapter file(s) → {dir}",
            files.len()
        ));
        conn.client()
            .upload(dir, None, |w| tarball::write_files(w, files))
            .map_err(|e| conn.explain(e))?;
    }
    for u in of_kind(|k| k == UploadKind::Workspace) {
        let (work, dest) = (&u.host_path, &u.sandbox_path);
        progress.status(&format!("uploading workspace {} → {dest}", work.display()));
        conn.client()
            .upload(dest, u.owner, |w| tarball::write_tree(w, work))
            .map_err(|e| conn.explain(e))?;
    }
    Ok(())
}
