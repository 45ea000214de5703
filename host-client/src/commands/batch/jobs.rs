//! The jobs file of `pitcrew batch`: JSON lines, one job per line (blank lines and lines
//! starting with `#` skipped), each a harness plus what varies per task:
//!
//! ```json
//! {"id": "issue-17", "harness": "harness.yaml", "workspace": "tasks/17", "prompt": "fix #17", "env": {"TASK": "17"}, "iterations": 2}
//! ```
//!
//! Paths are relative to the jobs file. `id` (default `job-<line>`) names the job's directory
//! in the batch and is what `--resume` goes by: letters, digits, `.`, `_`, `-`, at most 100.

use crate::output::Problems;
use anyhow::{bail, Context as _};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// One line of the jobs file, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    id: Option<String>,
    harness: PathBuf,
    workspace: Option<PathBuf>,
    prompt: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    iterations: Option<u32>,
}

/// A job, its paths resolved against the jobs file's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Unique within the batch; the job's directory name.
    pub id: String,
    /// The line it came from (1-based).
    pub line: usize,
    /// The harness file.
    pub harness: PathBuf,
    /// The workspace instead of the harness's `workdir`.
    pub workspace: Option<PathBuf>,
    /// The prompt instead of the harness's.
    pub prompt: Option<String>,
    /// Variables over the harness's `env:`.
    pub env: BTreeMap<String, String>,
    /// Iterations instead of the harness's.
    pub iterations: Option<u32>,
}

/// Whether `id` can name a directory: letters, digits, `.`, `_`, `-`; not `.` or `..`.
fn id_is_safe(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 100
        && id != "."
        && id != ".."
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Parses the jobs file at `path` (its text `text`), every problem named `FILE:LINE: …`.
pub fn parse(path: &Path, text: &str) -> anyhow::Result<Vec<Job>> {
    let base = path.parent().unwrap_or(Path::new("."));
    let file = path.display();
    let mut jobs = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut problems = Vec::new();
    // A line that is not JSON at all (a YAML or CSV jobs file): the format is said once, last.
    let mut not_json = false;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let parsed: Line = match serde_json::from_str(trimmed) {
            Ok(l) => l,
            Err(e) => {
                problems.push(line_problem(&file, line, &e));
                not_json |= e.is_syntax() || e.is_eof();
                continue;
            }
        };
        let id = parsed.id.unwrap_or_else(|| format!("job-{line}"));
        if !id_is_safe(&id) {
            problems.push(format!(
                "{file}:{line}: id {id:?}: letters, digits, '.', '_' and '-' only (at most 100), not '.' or '..'"
            ));
            continue;
        }
        if let Some(first) = seen.insert(id.clone(), line) {
            problems.push(format!(
                "{file}:{line}: id {id:?} is used twice (first on line {first})"
            ));
            continue;
        }
        let most = pitcrew_core::harness::MAX_ITERATIONS;
        if parsed.iterations.is_some_and(|n| !(1..=most).contains(&n)) {
            problems.push(format!(
                "{file}:{line}: iterations: expected an integer from 1 to {most}"
            ));
            continue;
        }
        jobs.push(Job {
            id,
            line,
            harness: base.join(parsed.harness),
            workspace: parsed.workspace.map(|w| base.join(w)),
            prompt: parsed.prompt,
            env: parsed.env,
            iterations: parsed.iterations,
        });
    }
    if not_json {
        problems.push(format!(
            "{file}: the jobs file is JSON lines, one object per line: \
             {{\"harness\": \"harness.yaml\", \"workspace\": \"tasks/17\", \"prompt\": \"fix it\"}} \
             (blank lines and lines starting with # are skipped)"
        ));
    }
    if !problems.is_empty() {
        return Err(Problems(problems).into());
    }
    if jobs.is_empty() {
        bail!("{file}: no jobs");
    }
    Ok(jobs)
}

/// `FILE:LINE: what serde_json found` for a line that is not a job, with the column where the
/// line stops being JSON (serde_json's own position counts lines of the one line it read: the
/// file's line is said instead).
fn line_problem(file: &std::path::Display<'_>, line: usize, e: &serde_json::Error) -> String {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    match text.strip_suffix(&suffix) {
        Some(what) if e.is_syntax() => format!("{file}:{line}: column {}: {what}", e.column()),
        Some(what) => format!("{file}:{line}: {what}"),
        None => format!("{file}:{line}: {text}"),
    }
}

/// Reads and parses the jobs file.
pub fn read(path: &Path) -> anyhow::Result<Vec<Job>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("jobs file {}", path.display()))?;
    parse(path, &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_jobs_with_paths_against_the_file() {
        let text = "# a comment\n\n{\"harness\":\"h.yaml\",\"workspace\":\"t/1\",\"env\":{\"A\":\"1\"}}\n{\"id\":\"b\",\"harness\":\"/abs/h.yaml\",\"prompt\":\"p\",\"iterations\":3}\n";
        let jobs = parse(Path::new("/d/jobs.jsonl"), text).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].id, "job-3");
        assert_eq!(jobs[0].harness, PathBuf::from("/d/h.yaml"));
        assert_eq!(jobs[0].workspace, Some(PathBuf::from("/d/t/1")));
        assert_eq!(jobs[0].env["A"], "1");
        assert_eq!(jobs[1].harness, PathBuf::from("/abs/h.yaml"));
        assert_eq!(jobs[1].iterations, Some(3));
    }

    #[test]
    fn every_bad_line_is_named() {
        let text = "{\"harness\":\"h\",\"wat\":1}\n{\"id\":\"../x\",\"harness\":\"h\"}\n{\"id\":\"a\",\"harness\":\"h\"}\n{\"id\":\"a\",\"harness\":\"h\"}\n{\"harness\":\"h\",\"iterations\":0}\nnot json\n";
        let err = parse(Path::new("jobs.jsonl"), text)
            .unwrap_err()
            .to_string();
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 6, "{err}");
        assert!(
            lines[0].starts_with("jobs.jsonl:1: unknown field `wat`"),
            "{err}"
        );
        assert!(lines[1].starts_with("jobs.jsonl:2: id \"../x\""), "{err}");
        assert!(lines[2].contains("used twice (first on line 3)"), "{err}");
        assert!(lines[3].starts_with("jobs.jsonl:5: iterations"), "{err}");
        assert!(
            lines[4].starts_with("jobs.jsonl:6: column 2: expected ident"),
            "{err}"
        );
        assert!(lines[5].contains("the jobs file is JSON lines"), "{err}");
        assert!(parse(Path::new("j"), "\n# none\n")
            .unwrap_err()
            .to_string()
            .contains("no jobs"));
    }

    #[test]
    fn a_yaml_jobs_file_is_told_the_format_and_the_line() {
        let text = "- harness: h.yaml\n  prompt: fix it\n";
        let err = parse(Path::new("jobs.yaml"), text).unwrap_err();
        let problems = &err.downcast_ref::<Problems>().unwrap().0;
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert_eq!(
            problems[0], "jobs.yaml:1: column 2: invalid number",
            "{problems:#?}"
        );
        assert!(problems[1].starts_with("jobs.yaml:2: "), "{problems:#?}");
        assert!(
            problems[2].starts_with("jobs.yaml: the jobs file is JSON lines, one object per line"),
            "{problems:#?}"
        );
    }
}
