//! The keys about this host: `workdir` (the local directory uploaded as the workspace),
//! `output` (where runs are written), `validation` (the command run here after each
//! iteration) and `feedback` (what of its output the next prompt carries).

use super::super::fs_checks::{check_output_dir, find_program};
use super::super::yaml::{location, Checker};
use super::{DEFAULT_FEEDBACK, MAX_FEEDBACK};
use crate::harness::units::parse_size_within;
use crate::manifest::Runtime;
use marked_yaml::types::MarkedMappingNode;
use marked_yaml::Node;
use std::path::{Path, PathBuf};

impl Checker<'_> {
    /// `workdir:`, an existing local directory.
    pub(super) fn workdir(&mut self, top: &MarkedMappingNode) -> Option<PathBuf> {
        let n = top.get_node("workdir")?;
        let raw = self.string(n, "workdir")?;
        let path = self.local_path(location(n), "workdir", &raw)?;
        if !path.is_dir() {
            self.problem(
                location(n),
                "workdir",
                format!("{} is not a directory", path.display()),
            );
            return None;
        }
        Some(path)
    }

    /// `output:`, a relative path inside the harness directory (default `runs`), checked as a
    /// place runs can be written.
    pub(super) fn output(&mut self, top: &MarkedMappingNode) -> PathBuf {
        let output = match top.get_node("output") {
            None => self.base.join("runs"),
            Some(n) => match self.string(n, "output") {
                Some(raw)
                    if !raw.is_empty()
                        && !Path::new(&raw).is_absolute()
                        && !raw.split('/').any(|s| s == "..") =>
                {
                    self.base.join(raw)
                }
                Some(raw) => {
                    self.problem(
                        location(n),
                        "output",
                        format!("{raw:?} must be a relative path inside the harness directory"),
                    );
                    self.base.join("runs")
                }
                None => self.base.join("runs"),
            },
        };
        if let Err(e) = check_output_dir(&self.base, &output) {
            self.problem(top.get_node("output").and_then(location), "output", e);
        }
        output
    }

    /// `validation:`, an argv list whose program this host can run (in the harness directory,
    /// after each iteration).
    pub(super) fn validation(&mut self, top: &MarkedMappingNode) -> Option<Vec<String>> {
        let n = top.get_node("validation")?;
        if !matches!(n, Node::Sequence(_)) {
            self.problem(
                location(n),
                "validation",
                "expected an argv list (no shell is run for you: write [sh, -c, \"…\"] if you \
                 want one)",
            );
            return None;
        }
        let v = self.string_list(n, "validation");
        let Some(program) = v.first() else {
            self.problem(location(n), "validation", "an empty command");
            return None;
        };
        let path = std::env::var_os("PATH");
        if let Err(why) = find_program(program, &self.base, path.as_deref()) {
            self.problem(
                location(n),
                "validation[0]",
                format!("the validation command cannot run on this host: {why}"),
            );
        }
        Some(v)
    }

    /// `feedback:`, the end of the validation's output in the next prompt: `true` (16 KiB),
    /// `false` or a size; it needs a `validation:` and a runtime with a prompt.
    pub(super) fn feedback(
        &mut self,
        top: &MarkedMappingNode,
        has_validation: bool,
        runtime: Option<Runtime>,
    ) -> Option<u64> {
        let n = top.get_node("feedback")?;
        let at = location(n);
        let text = self.string(n, "feedback")?;
        let keep = match text.as_str() {
            "false" => return None,
            "true" => DEFAULT_FEEDBACK,
            size => match parse_size_within(size, 1, MAX_FEEDBACK, "") {
                Ok(bytes) => bytes,
                Err(e) => {
                    self.problem(at, "feedback", format!("true, false or a size: {e}"));
                    return None;
                }
            },
        };
        if !has_validation {
            self.problem(
                at,
                "feedback",
                "feedback is what `validation:` printed: set validation",
            );
        }
        if matches!(runtime, Some(Runtime::Command)) {
            self.note(
                at,
                "feedback",
                "runtime command has no prompt to carry it: it is ignored",
            );
        }
        Some(keep)
    }
}
