//! Remote sources of a harness (`https://<forge>/<owner>/<repo>/tree/<ref>/<dir>#sha256=<pin>`):
//! admitted by the operator's allowlist, fetched by `pitcrew lock` into a content-addressed
//! cache, recorded in the harness's lock file, and resolved offline from the cache by `validate`,
//! `run` and `batch`. A copy is verified against its pin whenever it is used, and scanned before
//! it is uploaded.
//!
//! The operator's settings are environment variables:
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `PITCREW_ALLOWED_REMOTE_RESOURCES` | (none: every remote source refused) | URL prefixes, separated by commas or spaces |
//! | `PITCREW_CACHE_DIR` | `$XDG_CACHE_HOME/pitcrew`, else `~/.cache/pitcrew` | the cache |
//! | `PITCREW_REMOTE_MAX_FILES` | 20000 | most files of one fetched directory |
//! | `PITCREW_REMOTE_MAX_BYTES` | 100 MiB | most bytes of one fetched source |
//! | `PITCREW_REMOTE_FETCH_TIMEOUT` | 600 s | longest one git network call may take |
//! | `PITCREW_REMOTE_SCAN` | `report` | `refuse` turns scan findings into problems |
//!
//! The parts: `allowlist` (the prefixes), `cache` (the store), `git_fetch` (one fetch),
//! `lock_file` (the lock), `scan` (the content scan).

mod allowlist;
mod cache;
mod git_fetch;
mod lock_file;
mod scan;

#[cfg(test)]
mod tests;

pub use self::lock_file::{lock_path, write as write_lock};

use self::allowlist::Allowlist;
use self::cache::{Cache, CachedFile, Lookup, Origin};
use self::lock_file::{LockFile, LOCK_VERSION};
use pitcrew_core::harness::{
    self, HarnessError, RemoteKind, RemoteSource, RemoteSources, Resolved, Validated,
};
use pitcrew_core::tree_hash::{self, HashProgress, TreeFormat, TreeListing};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The caps of one fetch.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Most files of one directory.
    pub max_files: u64,
    /// Most bytes of one source (file content; the download may take 64 MiB more).
    pub max_bytes: u64,
    /// Longest one git network call may take.
    pub timeout: Duration,
}

/// The operator's settings for remote sources, from the environment.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The admitted URL prefixes.
    pub allowed: Allowlist,
    /// The cache.
    pub cache: Cache,
    /// The fetch caps.
    pub limits: Limits,
    /// Whether scan findings are problems (`PITCREW_REMOTE_SCAN=refuse`) rather than notes.
    pub refuse_findings: bool,
}

impl Settings {
    /// The settings from the environment; an unusable value is an error naming its variable.
    pub fn from_env() -> Result<Settings, String> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let number = |name: &str, default: u64| -> Result<u64, String> {
            match var(name) {
                None => Ok(default),
                Some(v) => v
                    .parse()
                    .map_err(|_| format!("{name}={v:?} is not a whole number")),
            }
        };
        let allowed =
            Allowlist::parse(&var("PITCREW_ALLOWED_REMOTE_RESOURCES").unwrap_or_default())
                .map_err(|e| format!("PITCREW_ALLOWED_REMOTE_RESOURCES: {e}"))?;
        let cache = match var("PITCREW_CACHE_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => match (var("XDG_CACHE_HOME"), var("HOME")) {
                (Some(xdg), _) => Path::new(&xdg).join("pitcrew"),
                (None, Some(home)) => Path::new(&home).join(".cache/pitcrew"),
                (None, None) => {
                    return Err(
                        "no cache directory: set PITCREW_CACHE_DIR (or HOME or XDG_CACHE_HOME)"
                            .into(),
                    )
                }
            },
        };
        let refuse_findings = match var("PITCREW_REMOTE_SCAN").as_deref() {
            None | Some("report") => false,
            Some("refuse") => true,
            Some(other) => {
                return Err(format!(
                    "PITCREW_REMOTE_SCAN={other:?}: expected report or refuse"
                ))
            }
        };
        Ok(Settings {
            allowed,
            cache: Cache::new(cache),
            limits: Limits {
                max_files: number("PITCREW_REMOTE_MAX_FILES", 20_000)?,
                max_bytes: number("PITCREW_REMOTE_MAX_BYTES", 100 << 20)?,
                timeout: Duration::from_secs(number("PITCREW_REMOTE_FETCH_TIMEOUT", 600)?),
            },
            refuse_findings,
        })
    }

    /// Refuses `source` unless a prefix admits it, naming the prefix that would.
    fn admit(&self, source: &RemoteSource) -> Result<(), String> {
        if self.allowed.admits(source).is_some() {
            return Ok(());
        }
        let now = if self.allowed.is_empty() {
            "admits nothing".to_string()
        } else {
            format!("admits {}", self.allowed.prefixes().join(", "))
        };
        Err(format!(
            "{} is not admitted: allowed_remote_resources (PITCREW_ALLOWED_REMOTE_RESOURCES) {now}; \
             the prefix {} would admit it",
            source.url,
            source.repository()
        ))
    }

    /// Refuses `source` resolved to the ref `ref_name` unless a prefix admits it with that
    /// ref ([`Allowlist::admits_resolved`]).
    fn admit_resolved(&self, source: &RemoteSource, ref_name: &str) -> Result<(), String> {
        if self.allowed.admits_resolved(source, ref_name).is_some() {
            return Ok(());
        }
        Err(format!(
            "{} resolves to the ref {ref_name:?}, which no prefix of allowed_remote_resources \
             (PITCREW_ALLOWED_REMOTE_RESOURCES) covers whole: a prefix past /{}/ must name the \
             whole ref",
            source.url,
            source.kind.as_str()
        ))
    }

    /// The scan's findings for the copy at `path`, as notes or, when refused, problems.
    fn scanned(
        &self,
        source: &RemoteSource,
        path: PathBuf,
        listing: Option<TreeListing>,
    ) -> Resolved {
        let findings = scan_notes(&path, source.name());
        let (notes, problems) = if self.refuse_findings {
            (Vec::new(), findings)
        } else {
            (findings, Vec::new())
        };
        Resolved {
            path,
            listing,
            notes,
            problems,
        }
    }
}

/// The content scan's findings for the copy at `path` (uploaded as `name`), each said as
/// `content scan: …`: the same for a remote copy and a local tree.
fn scan_notes(path: &Path, name: &str) -> Vec<String> {
    scan::scan(path, name)
        .into_iter()
        .map(|f| format!("content scan: {f}"))
        .collect()
}

/// Validates `file` with its remote entries resolved offline from the cache, and its local
/// plugins, skills and adapters scanned as a remote copy is, as `validate`, `run` and `batch`
/// do.
pub fn validate(file: &Path, progress: Option<&HashProgress>) -> Result<Validated, HarnessError> {
    let mut sources = CacheSources::new(file);
    harness::validate_with(file, progress, &mut sources)
}

/// Remote entries resolved offline: the lock must cover the entry with the same pin, and the
/// cache must hold a copy that still hashes to it.
struct CacheSources {
    harness: PathBuf,
    /// Settings and lock, read on the first remote entry (a harness without one needs neither).
    loaded: Option<Result<(Settings, Option<LockFile>), String>>,
}

impl CacheSources {
    fn new(harness: &Path) -> CacheSources {
        CacheSources {
            harness: harness.to_path_buf(),
            loaded: None,
        }
    }
}

impl RemoteSources for CacheSources {
    /// A local tree's findings are notes, whatever `PITCREW_REMOTE_SCAN` says (it is about
    /// remote sources, and the harness's directory is the operator's).
    fn scan_local(&mut self, path: &Path, name: &str) -> Vec<String> {
        scan_notes(path, name)
    }

    fn resolve(&mut self, source: &RemoteSource, _field: &str) -> Result<Resolved, String> {
        let harness = self.harness.clone();
        let lock_path = lock_path(&harness);
        let (settings, lock) = self
            .loaded
            .get_or_insert_with(|| {
                let settings = Settings::from_env()?;
                let lock = lock_file::read(&lock_path)?;
                Ok((settings, lock))
            })
            .as_ref()
            .map_err(Clone::clone)?;
        settings.admit(source)?;
        let relock = format!("run `pitcrew lock {}`", harness.display());
        let Some(lock) = lock else {
            return Err(format!(
                "{} is not locked: {relock} to fetch it and write {}",
                source.url,
                lock_path.display()
            ));
        };
        let Some(locked) = lock.entry(&source.url) else {
            return Err(format!(
                "{} is not in {}: {relock}",
                source.url,
                lock_path.display()
            ));
        };
        if locked.sha256 != source.sha256 {
            return Err(format!(
                "{} is locked with sha256={} in {}, and the harness pins sha256={}: {relock}",
                source.url,
                locked.sha256,
                lock_path.display(),
                source.sha256
            ));
        }
        let (path, origin, listing) = match settings.cache.lookup(source) {
            Lookup::Hit(path, origin, listing) => (path, *origin, listing),
            Lookup::Missing => {
                return Err(format!(
                    "{} is locked but not in the cache {}: {relock} to fetch it again",
                    source.url,
                    settings.cache.root().display()
                ))
            }
            Lookup::Tampered(why) => {
                return Err(format!(
                    "the cached copy of {} was changed on disk ({why}): it is not used; \
                     {relock} to fetch it again",
                    source.url
                ))
            }
            Lookup::Untrusted(why) => return Err(format!("{}: {why}", source.url)),
        };
        // Where the URL resolved is what the cache recorded when it fetched it, not what the
        // lock file claims: the lock must agree, and the allowlist judges the cache's record.
        if (&locked.ref_name, &locked.path) != (&origin.ref_name, &origin.path) {
            return Err(format!(
                "{} says {} resolved to the ref {:?}, path {:?}; the cache fetched it from the \
                 ref {:?}, path {:?}: {relock}",
                lock_path.display(),
                source.url,
                locked.ref_name,
                locked.path,
                origin.ref_name,
                origin.path
            ));
        }
        settings.admit_resolved(source, &origin.ref_name)?;
        Ok(settings.scanned(source, path, listing))
    }
}

/// Remote entries fetched (`pitcrew lock`): a verified cache hit is used as it is (unless
/// `refresh`), anything else fetched, verified against its pin and stored; every entry is
/// recorded for the lock file.
pub struct FetchingSources {
    settings: Settings,
    refresh: bool,
    /// Locked entries by URL.
    entries: BTreeMap<String, Origin>,
    /// What was fetched (URL and where it came from), for the report.
    pub fetched: Vec<String>,
    /// How many remote entries could not be resolved.
    pub failures: usize,
}

impl FetchingSources {
    /// Fetching with `settings`; `refresh` fetches even what the cache holds. Fetch
    /// directories a killed `pitcrew lock` left behind a day ago or more are removed.
    pub fn new(settings: Settings, refresh: bool) -> FetchingSources {
        settings.cache.sweep_staging(Duration::from_secs(24 * 3600));
        FetchingSources {
            settings,
            refresh,
            entries: BTreeMap::new(),
            fetched: Vec::new(),
            failures: 0,
        }
    }

    /// The lock file of what was resolved, for the harness file `harness`.
    pub fn lock(&self, harness: &Path) -> LockFile {
        LockFile {
            version: LOCK_VERSION,
            harness: harness
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            entries: self.entries.values().cloned().collect(),
        }
    }

    /// How many remote entries were resolved.
    pub fn resolved(&self) -> usize {
        self.entries.len()
    }

    /// Fetches `source` into the cache: its copy, where it came from, and a tree's listing.
    fn fetch(
        &mut self,
        source: &RemoteSource,
    ) -> Result<(PathBuf, Origin, Option<TreeListing>), String> {
        let cache = &self.settings.cache;
        let staging = cache.staging()?;
        let settings = &self.settings;
        let fetched = git_fetch::fetch(source, staging.path(), &settings.limits, &|ref_name| {
            settings.admit_resolved(source, ref_name)
        })
        .map_err(|e| format!("fetching {}: {e}", source.url))?;
        let (found, listing) = match source.kind {
            RemoteKind::Tree => {
                let digest =
                    tree_hash::hash_tree(&staging.path().join("content"), TreeFormat::ContentV1)
                        .map_err(|e| format!("{}: {e}", source.url))?;
                (digest.sha256, Some(digest.listing))
            }
            RemoteKind::Blob => {
                let record = tree_hash::sha256_file(&staging.path().join("content"))
                    .map_err(|e| format!("{}: {e}", source.url))?;
                (record.sha256, None)
            }
        };
        let files = listing
            .iter()
            .flat_map(|l| &l.files)
            .map(|f| CachedFile {
                path: f.path.clone(),
                sha256: f.sha256.clone(),
            })
            .collect();
        if found != source.sha256 {
            return Err(format!(
                "{} at {} ({}) hashes to sha256={found}, not to its pin sha256={}: the pin is \
                 wrong or the ref moved to other content",
                source.url, fetched.ref_name, fetched.commit, source.sha256
            ));
        }
        let origin = Origin {
            url: source.url.clone(),
            kind: source.kind.as_str().to_string(),
            sha256: source.sha256.clone(),
            ref_name: fetched.ref_name,
            path: fetched.path,
            commit: fetched.commit,
            fetched_at: utc_rfc3339(pitcrew_core::clock::now_secs()),
            files,
        };
        let path = cache
            .store(staging, source.kind, &origin)
            .map_err(|e| format!("storing {}: {e}", source.url))?;
        self.fetched.push(format!(
            "{} ({} at {})",
            source.url, origin.ref_name, origin.commit
        ));
        Ok((path, origin, listing))
    }
}

impl RemoteSources for FetchingSources {
    fn resolve(&mut self, source: &RemoteSource, _field: &str) -> Result<Resolved, String> {
        let resolved = self.fetch_or_reuse(source);
        self.failures += usize::from(resolved.is_err());
        resolved
    }
}

impl FetchingSources {
    fn fetch_or_reuse(&mut self, source: &RemoteSource) -> Result<Resolved, String> {
        self.settings.admit(source)?;
        let cached = if self.refresh {
            None
        } else {
            match self.settings.cache.lookup(source) {
                // A hit is a copy fetched for this URL (its own origin): the lock records
                // where this URL resolved.
                Lookup::Hit(path, origin, listing) => Some((path, *origin, listing)),
                Lookup::Missing => None,
                Lookup::Tampered(why) => {
                    tracing::warn!(
                        "the cached copy of {} was changed on disk ({why}): fetching it again",
                        source.url
                    );
                    None
                }
                // Nothing is fetched into a cache that cannot be trusted either.
                Lookup::Untrusted(why) => return Err(format!("{}: {why}", source.url)),
            }
        };
        let (path, origin, listing) = match cached {
            Some(hit) => {
                self.settings.admit_resolved(source, &hit.1.ref_name)?;
                hit
            }
            None => self.fetch(source)?,
        };
        self.entries.insert(source.url.clone(), origin);
        Ok(self.settings.scanned(source, path, listing))
    }
}

/// `secs` since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
fn utc_rfc3339(secs: u64) -> String {
    let (year, month, day, hour, minute, second) = crate::report::utc(secs);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z")
}
