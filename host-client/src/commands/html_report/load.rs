//! Reading a run or batch directory into what the page shows. Every record that is there must
//! parse: a report that silently left one out would say less than the directory does.

use crate::commands::batch::JobRecord;
use crate::report::RunDocument;
use anyhow::Context as _;
use pitcrew_core::record_names::{parse_iteration_dir, RESULT_FILE};
use pitcrew_core::result::IterationResult;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// What a directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A run's records directory.
    Run,
    /// A batch directory.
    Batch,
}

/// Whether `dir` is a run directory (`run.json`, or an `iteration-N/` directory) or a batch
/// directory (`batch.json`, or a directory with a `job.json`).
pub fn kind_of(dir: &Path) -> anyhow::Result<Option<Kind>> {
    if dir.join("run.json").exists() {
        return Ok(Some(Kind::Run));
    }
    if dir.join("batch.json").exists() {
        return Ok(Some(Kind::Batch));
    }
    let mut kind = None;
    for entry in std::fs::read_dir(dir).with_context(|| format!("{}", dir.display()))? {
        let entry = entry.with_context(|| format!("{}", dir.display()))?;
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let name = entry.file_name();
        if name.to_str().and_then(parse_iteration_dir).is_some() {
            return Ok(Some(Kind::Run));
        }
        if entry.path().join("job.json").is_file() {
            kind = Some(Kind::Batch);
        }
    }
    Ok(kind)
}

/// One iteration: its record and what the host saw of it.
#[derive(Debug)]
pub struct Iteration {
    /// The record's directory.
    pub dir: PathBuf,
    /// `iteration-N/result.json`.
    pub record: IterationResult,
    /// Its row in `run.json` (`duration_ms`, `events`, `validation_exit`), when there is one.
    pub host: Option<Value>,
}

/// A run directory.
#[derive(Debug)]
pub struct Run {
    /// The directory.
    pub dir: PathBuf,
    /// `run.json`, when the run wrote it.
    pub doc: Option<RunDocument<Vec<Value>>>,
    /// Its iterations, by number.
    pub iterations: Vec<Iteration>,
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let bytes = std::fs::read(path).with_context(|| format!("{}: reading", path.display()))?;
    serde_json::from_slice(&bytes)
        .with_context(|| format!("{}: not a readable record", path.display()))
}

/// Reads the run directory `dir`.
pub fn run(dir: &Path) -> anyhow::Result<Run> {
    let run_json = dir.join("run.json");
    let doc: Option<RunDocument<Vec<Value>>> = if run_json.exists() {
        Some(read_json(&run_json)?)
    } else {
        None
    };
    let mut numbered = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("{}", dir.display()))? {
        let entry = entry.with_context(|| format!("{}", dir.display()))?;
        let Some(n) = entry.file_name().to_str().and_then(parse_iteration_dir) else {
            continue;
        };
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            numbered.push((n, entry.path()));
        }
    }
    numbered.sort();
    let mut iterations = Vec::new();
    for (n, path) in numbered {
        let record: IterationResult = read_json(&path.join(RESULT_FILE))?;
        let host = doc.as_ref().and_then(|d| {
            d.iterations
                .iter()
                .find(|row| row["iteration"].as_u64() == Some(u64::from(n)))
                .cloned()
        });
        iterations.push(Iteration {
            dir: path,
            record,
            host,
        });
    }
    Ok(Run {
        dir: dir.to_path_buf(),
        doc,
        iterations,
    })
}

/// What a run's records say it used: iterations with usage, and the costs they reported.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Spend {
    /// Input tokens (fresh, cache reads and cache writes).
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// The sum of the costs reported.
    pub cost_usd: f64,
    /// Whether any iteration reported a cost.
    pub has_cost: bool,
    /// Whether any iteration reported usage.
    pub has_usage: bool,
}

impl Spend {
    /// Adds one iteration's usage.
    pub fn add(&mut self, usage: Option<&pitcrew_core::result::UsageRecord>) {
        let Some(u) = usage else { return };
        self.has_usage = true;
        self.input_tokens = self
            .input_tokens
            .saturating_add(u.input_tokens)
            .saturating_add(u.cache_read_tokens)
            .saturating_add(u.cache_write_tokens);
        self.output_tokens = self.output_tokens.saturating_add(u.output_tokens);
        if let Some(c) = u.cost_usd.filter(|c| c.is_finite()) {
            self.cost_usd += c;
            self.has_cost = true;
        }
    }

    /// Adds another sum.
    pub fn merge(&mut self, other: &Spend) {
        self.has_usage |= other.has_usage;
        self.has_cost |= other.has_cost;
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cost_usd += other.cost_usd;
    }
}

/// The usage of every iteration of `run`.
pub fn spend_of(run: &Run) -> Spend {
    let mut spend = Spend::default();
    for it in &run.iterations {
        spend.add(it.record.usage.as_ref());
    }
    spend
}

/// One job of a batch.
#[derive(Debug)]
pub struct Job {
    /// `<batch>/<id>/job.json`.
    pub record: JobRecord,
    /// What its attempts' runs used (the runs whose records are there).
    pub spend: Spend,
    /// Attempts that reported a run whose records are not there.
    pub missing_runs: usize,
}

/// A batch directory.
#[derive(Debug)]
pub struct Batch {
    /// The directory.
    pub dir: PathBuf,
    /// Its jobs, by id.
    pub jobs: Vec<Job>,
}

/// Where an attempt's run records are: below the job's own `records/` (where the batch puts
/// them, found even when the batch directory was moved), else the path it reported.
fn run_dir_of(job_dir: &Path, reported: &str) -> Option<PathBuf> {
    let reported = Path::new(reported);
    let below = reported
        .file_name()
        .map(|name| job_dir.join("records").join(name));
    below
        .filter(|p| p.is_dir())
        .or_else(|| reported.is_dir().then(|| reported.to_path_buf()))
}

/// Reads the batch directory `dir`: every `<job>/job.json`, and the runs its attempts report.
pub fn batch(dir: &Path) -> anyhow::Result<Batch> {
    let mut jobs = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("{}", dir.display()))? {
        let entry = entry.with_context(|| format!("{}", dir.display()))?;
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let job_dir = entry.path();
        let path = job_dir.join("job.json");
        if !path.exists() {
            continue;
        }
        let record: JobRecord = read_json(&path)?;
        let mut spend = Spend::default();
        let mut missing_runs = 0;
        for attempt in &record.attempts {
            let Some(reported) = &attempt.run_dir else {
                continue;
            };
            match run_dir_of(&job_dir, reported) {
                Some(run_dir) => spend.merge(&spend_of(&run(&run_dir)?)),
                None => missing_runs += 1,
            }
        }
        jobs.push(Job {
            record,
            spend,
            missing_runs,
        });
    }
    jobs.sort_by(|a, b| a.record.id.cmp(&b.record.id));
    Ok(Batch {
        dir: dir.to_path_buf(),
        jobs,
    })
}
