//! Collected iteration records on the host: a `collect` tar stream unpacked with the one safe
//! unpack rule both binaries share (`pitcrew_core::unpack`: no absolute paths, `..`, links,
//! devices, fifos or bad names; staged, then renamed).

use crate::engine::Connection;
use anyhow::Context as _;
use pitcrew_core::unpack::{unpack_tar, UnpackLimits};
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
    res.map_err(|e| conn.explain(e))
}
