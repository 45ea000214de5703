//! The keys that bound an iteration and the sandbox: `iterations`, `processes`, `memory`,
//! `disk`, `timeout`, `retention` and `upload_limits`, each within its maximum.

use super::super::units::{parse_duration_at_most, parse_size, parse_size_within};
use super::super::yaml::{location, Checker};
use super::{
    integer, MAX_DISK_BYTES, MAX_ITERATIONS, MAX_PROCESSES, MAX_RETAINED_BYTES,
    MAX_RETAINED_RECORDS, MAX_TIMEOUT, MAX_UPLOAD_BYTES, MAX_UPLOAD_ENTRIES,
};
use crate::manifest::Retention;
use crate::protocol::UploadLimits;
use marked_yaml::types::MarkedMappingNode;
use marked_yaml::Node;
use std::time::Duration;

/// The timeout of an iteration when the harness gives none: 30 minutes.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

impl Checker<'_> {
    /// `iterations:` (default 1).
    pub(super) fn iterations(&mut self, top: &MarkedMappingNode) -> u32 {
        let Some(n) = top.get_node("iterations") else {
            return 1;
        };
        match integer(n) {
            Some(i) if (1..=u64::from(MAX_ITERATIONS)).contains(&i) => {
                u32::try_from(i).unwrap_or(1)
            }
            _ => {
                self.problem(
                    location(n),
                    "iterations",
                    format!("expected an integer from 1 to {MAX_ITERATIONS}"),
                );
                1
            }
        }
    }

    /// `processes:` (default [`crate::manifest::DEFAULT_PROCESSES`]).
    pub(super) fn processes(&mut self, top: &MarkedMappingNode) -> u64 {
        let Some(n) = top.get_node("processes") else {
            return crate::manifest::DEFAULT_PROCESSES;
        };
        match integer(n) {
            Some(p) if (1..=MAX_PROCESSES).contains(&p) => p,
            _ => {
                self.problem(
                    location(n),
                    "processes",
                    format!("expected an integer from 1 to {MAX_PROCESSES}"),
                );
                crate::manifest::DEFAULT_PROCESSES
            }
        }
    }

    /// `memory:`, a size (default [`crate::manifest::DEFAULT_MEMORY_BYTES`]).
    pub(super) fn memory(&mut self, top: &MarkedMappingNode) -> u64 {
        let Some(n) = top.get_node("memory") else {
            return crate::manifest::DEFAULT_MEMORY_BYTES;
        };
        match self.string(n, "memory").as_deref().map(parse_size) {
            Some(Ok(bytes)) => bytes,
            Some(Err(e)) => {
                self.problem(location(n), "memory", e);
                crate::manifest::DEFAULT_MEMORY_BYTES
            }
            None => crate::manifest::DEFAULT_MEMORY_BYTES,
        }
    }

    /// `disk:`, a size (no budget by default).
    pub(super) fn disk(&mut self, top: &MarkedMappingNode) -> Option<u64> {
        let n = top.get_node("disk")?;
        let parsed = self.string(n, "disk").as_deref().map(|s| {
            parse_size_within(
                s,
                crate::manifest::MIN_DISK_BYTES,
                MAX_DISK_BYTES,
                "too small a budget",
            )
        });
        match parsed? {
            Ok(bytes) => Some(bytes),
            Err(e) => {
                self.problem(location(n), "disk", e);
                None
            }
        }
    }

    /// `timeout:`, a duration (default 30 minutes).
    pub(super) fn timeout(&mut self, top: &MarkedMappingNode) -> Duration {
        let Some(n) = top.get_node("timeout") else {
            return DEFAULT_TIMEOUT;
        };
        match self
            .string(n, "timeout")
            .as_deref()
            .map(|s| parse_duration_at_most(s, MAX_TIMEOUT))
        {
            Some(Ok(d)) if d.is_zero() => {
                self.problem(
                    location(n),
                    "timeout",
                    "a timeout of zero would kill the agent at once".to_string(),
                );
                Duration::from_secs(1)
            }
            Some(Ok(d)) => d,
            Some(Err(e)) => {
                self.problem(location(n), "timeout", e);
                Duration::from_secs(1)
            }
            None => Duration::from_secs(1),
        }
    }

    /// `retention: {records, size}`: the collected records the sandbox keeps; a key left out
    /// keeps its default.
    pub(super) fn retention(&mut self, node: &Node) -> Retention {
        let mut retention = Retention::default();
        let Some(m) = self.mapping(node, "retention") else {
            return retention;
        };
        self.unknown_keys(m, "retention", &["records", "size"]);
        if let Some(n) = m.get_node("records") {
            match integer(n) {
                Some(r) if r <= u64::from(MAX_RETAINED_RECORDS) => {
                    retention.records = u32::try_from(r).unwrap_or(MAX_RETAINED_RECORDS);
                }
                _ => self.problem(
                    location(n),
                    "retention.records",
                    format!("expected an integer from 0 to {MAX_RETAINED_RECORDS}"),
                ),
            }
        }
        if let Some(n) = m.get_node("size") {
            match self
                .string(n, "retention.size")
                .as_deref()
                .map(|s| parse_size_within(s, 0, MAX_RETAINED_BYTES, ""))
            {
                Some(Ok(bytes)) => retention.bytes = bytes,
                Some(Err(e)) => self.problem(location(n), "retention.size", e),
                None => {}
            }
        }
        retention
    }

    /// `upload_limits: {entries, size}`: the most one upload (a plugin, a skills directory, the
    /// workspace) may hold; a new sandbox's supervisor is started with them, and a key left out
    /// keeps its default (100000 entries, 4GiB).
    pub(super) fn upload_limits(&mut self, node: &Node) -> UploadLimits {
        let mut limits = UploadLimits::default();
        let Some(m) = self.mapping(node, "upload_limits") else {
            return limits;
        };
        self.unknown_keys(m, "upload_limits", &["entries", "size"]);
        if let Some(n) = m.get_node("entries") {
            match integer(n) {
                Some(e) if (1..=MAX_UPLOAD_ENTRIES).contains(&e) => limits.max_entries = e,
                _ => self.problem(
                    location(n),
                    "upload_limits.entries",
                    format!("expected an integer from 1 to {MAX_UPLOAD_ENTRIES}"),
                ),
            }
        }
        if let Some(n) = m.get_node("size") {
            match self.string(n, "upload_limits.size").as_deref().map(|s| {
                parse_size_within(
                    s,
                    1 << 20,
                    MAX_UPLOAD_BYTES,
                    "the least an upload may be given",
                )
            }) {
                Some(Ok(bytes)) => limits.max_bytes = bytes,
                Some(Err(e)) => self.problem(location(n), "upload_limits.size", e),
                None => {}
            }
        }
        limits
    }
}
