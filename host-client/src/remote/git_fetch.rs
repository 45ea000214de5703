//! Fetching one remote source with git: a shallow, blobless fetch of the ref's commit, a listing
//! of just the named path from its trees, then one fetch of exactly the blobs that path holds,
//! read out of git's object store and written by pitcrew itself.
//!
//! Git smart HTTP rather than a forge's archive endpoint: every forge serves it (GitHub,
//! GitLab, Gitea, Forgejo), it fetches only the named path of a large repository, and the
//! listing (modes included) is known from the trees before any file content is fetched, so a
//! symlink, a submodule or a tree over the file cap is refused before its content is
//! downloaded.
//! Nothing is checked out: no `.gitattributes` filter, end-of-line conversion or hook runs, so
//! the bytes are the ones the repository stores and nothing fetched is executed on the host.
//! Git's own settings still apply (credential helpers, proxies, `GIT_SSL_CAINFO`); only `https`
//! is allowed as a transport, redirects are not followed (they would leave the URL the
//! allowlist admitted), objects are checked as they arrive (`transfer.fsckObjects`), no object
//! is ever fetched lazily behind the bounds (`GIT_NO_LAZY_FETCH`), and every call shares one
//! deadline and one disk cap, its whole process group killed past either.

use super::Limits;
use pitcrew_core::harness::{RemoteKind, RemoteSource};
use std::collections::BTreeSet;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a fetch resolved and wrote.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The ref the URL named (`main`, `v1.2`, `feature/x`, or a commit id).
    pub ref_name: String,
    /// The path inside the repository.
    pub path: String,
    /// The commit the ref pointed at.
    pub commit: String,
}

/// A fetch that failed, with the reason for the user.
pub type FetchError = String;

/// Fetches `source` into `staging` (an empty directory): the directory's files below
/// `staging/content/`, or the file as `staging/content`. Symlinks, submodules and a tree over
/// the file cap are refused before any file content is fetched; the byte cap is checked once
/// the files are in git's store (the download itself bounded by the disk cap), before anything
/// is written. Verifying the pin is the caller's.
/// Every git call shares one deadline (`limits.timeout` for the whole fetch) and one disk cap.
/// `admit_ref` is asked about the ref the URL resolves to before anything but the refs is
/// fetched.
pub fn fetch(
    source: &RemoteSource,
    staging: &Path,
    limits: &Limits,
    admit_ref: &dyn Fn(&str) -> Result<(), String>,
) -> Result<Fetched, FetchError> {
    let git = Git {
        dir: staging.join("git"),
        scratch: staging.to_path_buf(),
        limits,
        deadline: Instant::now() + limits.timeout,
    };
    git.run(&["init", "-q", "--bare"], None)?;
    git.run(&["remote", "add", "origin", &source.repository()], None)?;
    let refs = git.run(&["ls-remote", "--heads", "--tags", "origin"], None)?;
    let (ref_name, want, path) = split_ref(source, &String::from_utf8_lossy(&refs))?;
    admit_ref(&ref_name)?;
    git.run(
        &[
            "fetch",
            "-q",
            "--depth",
            "1",
            "--filter=blob:none",
            "--no-tags",
            "--recurse-submodules=no",
            "origin",
            &want,
        ],
        None,
    )?;
    let commit =
        String::from_utf8_lossy(&git.run(&["rev-parse", "--verify", "FETCH_HEAD^{commit}"], None)?)
            .trim()
            .to_string();
    if want == ref_name {
        on_a_branch_or_tag(&git, source, &commit)?;
    }
    let entries = match source.kind {
        RemoteKind::Tree => list_tree(&git, &commit, &path, limits)?,
        RemoteKind::Blob => list_blob(&git, &commit, &path)?,
    };
    // Exactly these blobs, in one request (the way git's own lazy fetch asks for them).
    let oids: String = entries.iter().map(|e| format!("{}\n", e.oid)).collect();
    git.run(
        &[
            "-c",
            "fetch.negotiationAlgorithm=noop",
            "fetch",
            "-q",
            "--no-tags",
            "--no-write-fetch-head",
            "--recurse-submodules=no",
            "--filter=blob:none",
            "--stdin",
            "origin",
        ],
        Some(oids.as_bytes()),
    )?;
    // Every blob present, and their sizes within the cap, before anything is written.
    let sizes = git.run(
        &[
            "cat-file",
            "--batch-check=%(objectname) %(objecttype) %(objectsize)",
        ],
        Some(oids.as_bytes()),
    )?;
    let mut total: u64 = 0;
    for line in String::from_utf8_lossy(&sizes).lines() {
        let size = match line.split(' ').collect::<Vec<_>>().as_slice() {
            [_, "blob", size] => size.parse::<u64>().ok(),
            _ => None,
        }
        .ok_or_else(|| format!("the server did not send every file of {path}: {line}"))?;
        total = total.saturating_add(size);
        if total > limits.max_bytes {
            return Err(format!(
                "{path}: more than {} bytes of file content (PITCREW_REMOTE_MAX_BYTES)",
                limits.max_bytes
            ));
        }
    }
    write_blobs(&git, &entries, &staging.join("content"), source.kind)?;
    Ok(Fetched {
        ref_name,
        path,
        commit,
    })
}

/// Refuses a commit named by its id unless a branch or tag of the repository holds it: a forge
/// serves commits that are not the repository's through its URL too (a pull request's
/// `refs/pull/N/head`, a fork's commits on GitHub), which an allowlist of the repository must
/// not admit. The history of every branch and tag is fetched without trees or files
/// (`--filter=tree:0`) for the check.
fn on_a_branch_or_tag(
    git: &Git<'_>,
    source: &RemoteSource,
    commit: &str,
) -> Result<(), FetchError> {
    git.run(
        &[
            "fetch",
            "-q",
            "--filter=tree:0",
            "--no-tags",
            "--recurse-submodules=no",
            "origin",
            "+refs/heads/*:refs/remotes/origin/*",
            "+refs/tags/*:refs/tags/*",
        ],
        None,
    )?;
    let holders = git.run(
        &[
            "for-each-ref",
            "--count=1",
            "--contains",
            commit,
            "refs/remotes/origin",
            "refs/tags",
        ],
        None,
    )?;
    if holders.is_empty() {
        return Err(format!(
            "the commit {commit} is on no branch or tag of {}: a pull request's or a fork's \
             commit is not the repository's; name a branch or tag, or a commit one of them holds",
            source.repository()
        ));
    }
    Ok(())
}

/// One file of the fetched path: where it goes, its blob and whether it is executable.
#[derive(Debug)]
struct Entry {
    /// Relative to the fetched directory (empty for a single file).
    rel: Vec<u8>,
    oid: String,
    executable: bool,
}

/// Where the ref ends in `tree/<ref>/<path>`: a full commit id, or the one run of leading
/// segments that names a branch or tag of the repository (`refs` is `git ls-remote` output;
/// more than one is refused as ambiguous). Returns the ref as written, what to fetch, and the
/// path.
fn split_ref(source: &RemoteSource, refs: &str) -> Result<(String, String, String), FetchError> {
    let segments = &source.ref_and_path;
    let first = &segments[0];
    if first.len() == 40 && first.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok((first.clone(), first.clone(), segments[1..].join("/")));
    }
    let names: BTreeSet<&str> = refs
        .lines()
        .filter_map(|line| Some(line.split_once('\t')?.1))
        .collect();
    let mut found = Vec::new();
    for end in (1..segments.len()).rev() {
        let candidate = segments[..end].join("/");
        for full in [
            format!("refs/heads/{candidate}"),
            format!("refs/tags/{candidate}"),
        ] {
            if names.contains(full.as_str()) {
                found.push((candidate.clone(), full, segments[end..].join("/")));
            }
        }
    }
    // Two readings of one URL (a branch `main` and a tag `main/p`, or a branch and a tag of
    // one name) are refused: which one a reader, or an allowlist, meant is not known.
    match found.as_slice() {
        [one] => return Ok(one.clone()),
        [first, second, ..] => {
            return Err(format!(
                "{}: ambiguous, both {} (path {:?}) and {} (path {:?}) are refs of {}; name a \
                 full commit id instead",
                source.url,
                first.1,
                first.2,
                second.1,
                second.2,
                source.repository()
            ))
        }
        [] => {}
    }
    Err(format!(
        "{}: no branch or tag of {} begins {:?} (give a branch, a tag or a full commit id \
         after /{}/)",
        source.url,
        source.repository(),
        segments.join("/"),
        source.kind.as_str()
    ))
}

/// The files below `path` at `commit`, from the trees alone: symlinks and submodules refused,
/// the file count capped.
fn list_tree(
    git: &Git<'_>,
    commit: &str,
    path: &str,
    limits: &Limits,
) -> Result<Vec<Entry>, FetchError> {
    match git.entry_type(commit, path)?.as_deref() {
        Some("tree") => {}
        Some("blob") => {
            return Err(format!(
                "{path} is a file at {commit}, not a directory (use …/blob/… for a file)"
            ))
        }
        Some(other) => return Err(format!("{path} is a {other} at {commit}, not a directory")),
        None => return Err(format!("{path} does not exist at {commit}")),
    }
    let listing = git.run(&["ls-tree", "-r", "-z", &format!("{commit}:{path}")], None)?;
    let mut entries = Vec::new();
    for record in listing.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        entries.push(parse_ls_tree(record, path)?);
        if entries.len() as u64 > limits.max_files {
            return Err(format!(
                "{path} holds more than {} files (PITCREW_REMOTE_MAX_FILES)",
                limits.max_files
            ));
        }
    }
    if entries.is_empty() {
        return Err(format!("{path} holds no files at {commit}"));
    }
    Ok(entries)
}

/// The one file `path` at `commit`.
fn list_blob(git: &Git<'_>, commit: &str, path: &str) -> Result<Vec<Entry>, FetchError> {
    if git.entry_type(commit, path)?.as_deref() == Some("tree") {
        return Err(format!(
            "{path} is a directory at {commit} (use …/tree/… for a directory)"
        ));
    }
    let listing = git.run(&["ls-tree", "-z", commit, "--", path], None)?;
    let record = listing
        .split(|b| *b == 0)
        .find(|r| !r.is_empty())
        .ok_or_else(|| format!("{path} does not exist at {commit}"))?;
    let mut entry = parse_ls_tree(record, "")?;
    entry.rel.clear();
    Ok(vec![entry])
}

/// One `ls-tree -z` record: `<mode> <type> <oid>\t<path>`.
fn parse_ls_tree(record: &[u8], base: &str) -> Result<Entry, FetchError> {
    let tab = record
        .iter()
        .position(|b| *b == b'\t')
        .ok_or_else(|| "git ls-tree printed a record without a path".to_string())?;
    let head = String::from_utf8_lossy(&record[..tab]);
    let rel = record[tab + 1..].to_vec();
    let shown = match base {
        "" => String::from_utf8_lossy(&rel).into_owned(),
        base => format!("{base}/{}", String::from_utf8_lossy(&rel)),
    };
    let mut fields = head.split(' ');
    let (mode, kind, oid) = (
        fields.next().unwrap_or_default(),
        fields.next().unwrap_or_default(),
        fields.next().unwrap_or_default().to_string(),
    );
    match (mode, kind) {
        ("120000", _) => Err(format!(
            "{shown} is a symlink: symlinks are not supported in remote sources (as in local \
             trees)"
        )),
        ("160000", _) | (_, "commit") => Err(format!(
            "{shown} is a submodule: submodules are not supported in remote sources"
        )),
        (_, "blob")
            if rel
                .split(|b| *b == b'/')
                .any(|c| c.is_empty() || c == b"." || c == b".." || c == b".git") =>
        {
            Err(format!(
                "{shown}: a path with an empty, `.`, `..` or `.git` component is refused"
            ))
        }
        (_, "blob") => Ok(Entry {
            rel,
            oid,
            executable: mode == "100755",
        }),
        _ => Err(format!(
            "{shown} is a {kind} of mode {mode}, not a regular file"
        )),
    }
}

/// Writes every entry's blob (all present: checked before) as `target` for a file, or below
/// the directory `target` for a tree. `cat-file` reads the local store only: no lazy fetch.
fn write_blobs(
    git: &Git<'_>,
    entries: &[Entry],
    target: &Path,
    kind: RemoteKind,
) -> Result<(), FetchError> {
    let mut child = git
        .command(&["cat-file", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("git cat-file: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("git cat-file: no stdin")?;
    let oids: Vec<String> = entries.iter().map(|e| e.oid.clone()).collect();
    let feeder = std::thread::spawn(move || {
        for oid in oids {
            if writeln!(stdin, "{oid}").is_err() {
                break;
            }
        }
    });
    let mut out = BufReader::new(child.stdout.take().ok_or("git cat-file: no stdout")?);
    let result = (|| {
        for entry in entries {
            let mut header = String::new();
            out.read_line(&mut header)
                .map_err(|e| format!("git cat-file: {e}"))?;
            let size: u64 = header
                .trim_end()
                .rsplit(' ')
                .next()
                .and_then(|s| s.parse().ok())
                .filter(|_| header.contains(" blob "))
                .ok_or_else(|| format!("git cat-file could not read blob {}", entry.oid))?;
            let path: PathBuf = match kind {
                RemoteKind::Blob => target.to_path_buf(),
                RemoteKind::Tree => target.join(std::ffi::OsStr::from_bytes(&entry.rel)),
            };
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("{}: {e}", parent.display()))?;
            }
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            let copied = std::io::copy(&mut (&mut out).take(size), &mut file)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            if copied != size {
                return Err(format!("git cat-file ended inside blob {}", entry.oid));
            }
            let mode = if entry.executable { 0o755 } else { 0o644 };
            file.set_permissions(std::fs::Permissions::from_mode(mode))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            let mut newline = [0u8; 1];
            out.read_exact(&mut newline)
                .map_err(|e| format!("git cat-file: {e}"))?;
        }
        Ok(())
    })();
    let _ = child.kill();
    let _ = child.wait();
    let _ = feeder.join();
    result
}

/// Git run in the fetch's own repository, every call bounded by one deadline and by the disk
/// the staging directory takes.
struct Git<'a> {
    /// The repository.
    dir: PathBuf,
    /// The staging directory: the repository and each call's output files, all measured.
    scratch: PathBuf,
    limits: &'a Limits,
    deadline: Instant,
}

/// The most of a call's standard output read back (an `ls-remote` of a repository with a
/// hundred thousand tags is a few MiB).
const MAX_STDOUT: u64 = 64 << 20;
/// The most of a call's standard error kept for its message.
const STDERR_TAIL: u64 = 4096;

impl Git<'_> {
    /// `git` with the settings every call shares: only https, no redirects, no prompts, no
    /// hooks, no lazy fetches, literal paths, objects checked (`fsck`) as they arrive, the
    /// user's repository variables cleared; in a process group of its own.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("git");
        for name in [
            "GIT_DIR",
            "GIT_WORK_TREE",
            "GIT_INDEX_FILE",
            "GIT_OBJECT_DIRECTORY",
            "GIT_ALTERNATE_OBJECT_DIRECTORIES",
            "GIT_NAMESPACE",
            "GIT_CEILING_DIRECTORIES",
        ] {
            cmd.env_remove(name);
        }
        cmd.env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_LITERAL_PATHSPECS", "1")
            // Every network step is one of ours, bounded; a missing object is an error, never
            // a lazy fetch behind the bounds.
            .env("GIT_NO_LAZY_FETCH", "1")
            .env("GIT_DIR", &self.dir)
            .args([
                "-c",
                "protocol.allow=never",
                "-c",
                "protocol.https.allow=always",
                // A redirect would leave the URL the allowlist admitted.
                "-c",
                "http.followRedirects=false",
                "-c",
                "core.hooksPath=/dev/null",
                "-c",
                "transfer.fsckObjects=true",
                // No background maintenance: it would outlive the call, out of its group.
                "-c",
                "maintenance.auto=false",
                "-c",
                "gc.auto=0",
            ])
            .args(args)
            .process_group(0);
        cmd
    }

    /// Runs `git args`, feeding `input`: its standard output, or its error with the end of
    /// git's message. Killed (its whole process group) past the fetch's deadline or once the
    /// staging directory grows past the byte cap plus 64 MiB, so a hostile server can neither
    /// hold the fetch nor fill the disk.
    fn run(&self, args: &[&str], input: Option<&[u8]>) -> Result<Vec<u8>, FetchError> {
        let what = format!(
            "git {}",
            args.iter()
                .find(|a| !a.starts_with('-') && !a.contains('='))
                .unwrap_or(&"")
        );
        let out_path = self.scratch.join("git.out");
        let err_path = self.scratch.join("git.err");
        let create =
            |p: &Path| std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()));
        let mut child = self
            .command(args)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(create(&out_path)?)
            .stderr(create(&err_path)?)
            .spawn()
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    "git is needed to fetch remote sources and is not on PATH".to_string()
                } else {
                    format!("git: {e}")
                }
            })?;
        if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
            let input = input.to_vec();
            std::thread::spawn(move || {
                let _ = stdin.write_all(&input);
            });
        }
        let cap = self.limits.max_bytes.saturating_add(64 << 20);
        let kill = |child: &mut std::process::Child| {
            if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            }
            let _ = child.kill();
            let _ = child.wait();
        };
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) => {}
                Err(e) => return Err(format!("{what}: {e}")),
            }
            if Instant::now() > self.deadline {
                kill(&mut child);
                return Err(format!(
                    "{what}: the fetch took longer than {} s (PITCREW_REMOTE_FETCH_TIMEOUT)",
                    self.limits.timeout.as_secs()
                ));
            }
            if disk_usage(&self.scratch) > cap {
                kill(&mut child);
                return Err(format!(
                    "{what} wrote more than {cap} bytes: over PITCREW_REMOTE_MAX_BYTES"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if status.success() {
            let mut stdout = Vec::new();
            std::fs::File::open(&out_path)
                .and_then(|f| f.take(MAX_STDOUT + 1).read_to_end(&mut stdout))
                .map_err(|e| format!("{}: {e}", out_path.display()))?;
            if stdout.len() as u64 > MAX_STDOUT {
                return Err(format!("{what} printed more than {MAX_STDOUT} bytes"));
            }
            Ok(stdout)
        } else {
            let stderr = tail(&err_path, STDERR_TAIL);
            let last = stderr.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
            Err(format!("{what} failed ({status}): {}", last.trim()))
        }
    }

    /// The type of the entry `path` at `commit` (`tree`, `blob`, `commit`), from its parent
    /// tree (no content fetched), or `None` when there is none.
    fn entry_type(&self, commit: &str, path: &str) -> Result<Option<String>, FetchError> {
        let listing = self.run(&["ls-tree", "-z", commit, "--", path], None)?;
        Ok(listing
            .split(|b| *b == 0)
            .filter_map(|r| {
                let tab = r.iter().position(|b| *b == b'\t')?;
                (&r[tab + 1..] == path.as_bytes())
                    .then(|| {
                        String::from_utf8_lossy(&r[..tab])
                            .split(' ')
                            .nth(1)
                            .map(str::to_string)
                    })
                    .flatten()
            })
            .next())
    }
}

/// The last `n` bytes of the file at `path`, as text.
fn tail(path: &Path, n: u64) -> String {
    use std::io::Seek as _;
    let mut bytes = Vec::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = f.seek(std::io::SeekFrom::Start(len.saturating_sub(n)));
        let _ = f.take(n).read_to_end(&mut bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The bytes of the files below `dir` (not following links).
fn disk_usage(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(read) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in read.flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => stack.push(entry.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}
