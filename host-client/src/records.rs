//! Collected iteration records on the host: a `collect` tar stream unpacked with the one safe
//! unpack rule both binaries share (`pitcrew_core::unpack`: no absolute paths, `..`, links,
//! devices, fifos or bad names; staged, then renamed), owner-only: a record holds what the
//! agent saw and wrote (prompts, transcripts, output), which is nobody else's to read.

use crate::engine::Connection;
use anyhow::Context as _;
use pitcrew_core::unpack::{unpack_tar, UnpackLimits};
use std::path::Path;

/// How a collected record is unpacked: the default limits, owner-only modes.
fn record_limits() -> UnpackLimits {
    UnpackLimits {
        private: true,
        ..UnpackLimits::default()
    }
}

/// Collects `iteration` (default: the latest) into `dest` (created; must not exist).
pub fn collect_into(
    conn: &mut Connection,
    iteration: Option<u32>,
    dest: &Path,
) -> anyhow::Result<()> {
    let limits = record_limits();
    let res = conn.client().collect(iteration, |r| {
        unpack_tar(r, dest, &limits, None)
            .with_context(|| format!("{}: unpacking the record", dest.display()))?;
        Ok(())
    });
    res.map_err(|e| conn.explain(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_become_owner_only() {
        use std::fs;
        use std::os::unix::fs::PermissionsExt as _;
        // A record as `collect` streams it: a file, an executable in a subdirectory.
        let mut b = tar::Builder::new(Vec::new());
        for (path, mode, data) in [
            ("result.json", 0o644, &b"{}"[..]),
            ("output/sub/tool", 0o755, &b"#!/bin/sh\n"[..]),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(mode);
            h.set_entry_type(tar::EntryType::Regular);
            b.append_data(&mut h, path, data).unwrap();
        }
        let bytes = b.into_inner().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("iteration-1");
        unpack_tar(&bytes[..], &d, &record_limits(), None).unwrap();
        let mode = |p: &str| fs::metadata(d.join(p)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(""), 0o700);
        assert_eq!(mode("result.json"), 0o600);
        assert_eq!(mode("output/sub"), 0o700);
        assert_eq!(mode("output/sub/tool"), 0o700);
    }
}
