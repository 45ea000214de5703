//! Collected iteration records on the host: a `collect` tar stream unpacked with the one safe
//! unpack rule both binaries share (`pitcrew_core::unpack`: no absolute paths, `..`, links,
//! devices, fifos or bad names; staged, then renamed), then made owner-only: a record holds what
//! the agent saw and wrote (prompts, transcripts, output), which is nobody else's to read.

use crate::engine::Connection;
use anyhow::Context as _;
use pitcrew_core::unpack::{unpack_tar, UnpackLimits};
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

/// Collects `iteration` (default: the latest) into `dest` (created; must not exist).
pub fn collect_into(
    conn: &mut Connection,
    iteration: Option<u32>,
    dest: &Path,
) -> anyhow::Result<()> {
    let limits = UnpackLimits::default();
    let res = conn.client().collect(iteration, |r| {
        unpack_tar(r, dest, &limits, None)
            .with_context(|| format!("{}: unpacking the record", dest.display()))?;
        Ok(())
    });
    res.map_err(|e| conn.explain(e))?;
    make_private(dest)
}

/// Makes the unpacked tree under `dir` owner-only: directories 0700, files 0600 (0700 when the
/// owner could execute them). It holds only directories and regular files (the unpack refuses
/// everything else).
fn make_private(dir: &Path) -> anyhow::Result<()> {
    let chmod = |path: &Path, mode: u32| {
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
            .with_context(|| format!("{}: chmod {mode:o}", path.display()))
    };
    chmod(dir, 0o700)?;
    for entry in fs::read_dir(dir).with_context(|| format!("{}: read", dir.display()))? {
        let entry = entry.with_context(|| format!("{}: read", dir.display()))?;
        let path = entry.path();
        let meta =
            fs::symlink_metadata(&path).with_context(|| format!("{}: stat", path.display()))?;
        if meta.is_dir() {
            make_private(&path)?;
        } else if meta.is_file() {
            let exec = meta.permissions().mode() & 0o100 != 0;
            chmod(&path, if exec { 0o700 } else { 0o600 })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_become_owner_only() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("iteration-1");
        fs::create_dir_all(d.join("output/sub")).unwrap();
        fs::write(d.join("result.json"), "{}").unwrap();
        fs::write(d.join("output/sub/tool"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(d.join("output/sub/tool"), fs::Permissions::from_mode(0o755)).unwrap();
        make_private(&d).unwrap();
        let mode = |p: &str| fs::metadata(d.join(p)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(""), 0o700);
        assert_eq!(mode("result.json"), 0o600);
        assert_eq!(mode("output/sub"), 0o700);
        assert_eq!(mode("output/sub/tool"), 0o700);
    }
}
