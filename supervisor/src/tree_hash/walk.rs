//! The walk, overlapped with hashing: every worker takes the next task from one shared stack,
//! either a directory to list (its subdirectories and its files are pushed back as tasks) or the
//! next file of a listed directory to hash. Hashing starts as soon as the root is listed, and no
//! worker waits for a sequential walk.
//!
//! Everything below the root is reached with `openat` relative to its parent's descriptor and
//! `O_NOFOLLOW`; a directory's descriptor stays open only while its files or subdirectories are
//! still on the stack (last in, first out, so about one directory per level of the tree is open).
//!
//! The workers allocate nothing per file: a directory's file names are one string, and a hashed
//! file is kept as its directory's names, its index and its raw digest. The paths and hex digests
//! of the listing are made by the calling thread once the workers are done. (`pitcrew-init`
//! allocates from one malloc arena, and its long-lived server without glibc's per-thread cache,
//! so an allocation in a worker may wait for the arena's lock held by another.)
//!
//! Errors are reported as a sequential walk would: the first refusal or I/O error met while
//! listing, in depth-first order with sorted names, wins over any error met while hashing; among
//! hashing errors, the first file in that same order among those seen. After the first error no
//! more files are hashed, but the directories are still listed so that the reported listing error
//! does not depend on scheduling.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BTreeSet;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::error::{Refusal, TreeError};
use super::hasher::{hash_entry, hex_digest, FileFailure, BUFFER_SIZE};
use super::{FileRecord, HashProgress, TreeListing};

/// A worker claims `left / CLAIM_DIVISOR` of the files left in a directory, at least 1 and at
/// most [`MAX_CLAIM`].
const CLAIM_DIVISOR: usize = 16;
const MAX_CLAIM: usize = 8;

/// Flags for every directory below the root.
fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// A listed directory whose files are being hashed.
struct Listed {
    fd: OwnedFd,
    /// Its path and its regular files.
    names: Arc<FileNames>,
}

/// A directory's relative path and its regular files' names, sorted bytewise.
#[derive(Default)]
struct FileNames {
    /// Relative path without `./`; empty for the root.
    rel: String,
    /// The names end to end.
    text: String,
    /// Where each name ends in `text`.
    ends: Vec<usize>,
}

impl FileNames {
    fn len(&self) -> usize {
        self.ends.len()
    }

    fn name(&self, i: usize) -> &str {
        let start = i.checked_sub(1).map_or(0, |p| self.ends[p]);
        &self.text[start..self.ends[i]]
    }

    fn push(&mut self, name: &str) {
        self.text.push_str(name);
        self.ends.push(self.text.len());
    }

    /// `rel/name` of the file at `i`.
    fn path(&self, i: usize) -> String {
        join(&self.rel, self.name(i))
    }
}

/// A directory still to be opened and listed.
struct Pending {
    /// Relative path without `./`; empty for the root.
    rel: String,
    /// The root's descriptor, or the parent's descriptor and the offset of the name in `rel`.
    source: Source,
}

enum Source {
    Root(OwnedFd),
    Child(Arc<Listed>, usize),
}

/// An entry of the shared stack.
enum Task {
    Dir(Pending),
    /// The files of a listed directory from index `next` on.
    Files {
        dir: Arc<Listed>,
        next: usize,
    },
}

/// What a worker takes from the stack.
enum Work {
    Dir(Pending),
    Files(Arc<Listed>, std::ops::Range<usize>),
}

struct State {
    stack: Vec<Task>,
    /// Workers listing a directory (they may still push tasks).
    listing: usize,
}

struct Shared<'a> {
    root: &'a Path,
    state: Mutex<State>,
    wake: Condvar,
    /// Set on the first error: no more files are hashed.
    failed: AtomicBool,
    progress: Option<&'a HashProgress>,
}

/// An error with its position in a sequential walk.
struct Failure {
    /// 0 for listing errors, 1 for hashing errors.
    phase: u8,
    /// The directory being listed, or the directory of the file being hashed.
    dir: String,
    /// The file name (hashing errors only).
    name: String,
    error: TreeError,
}

impl Failure {
    fn walk_order(&self, other: &Failure) -> CmpOrdering {
        self.phase
            .cmp(&other.phase)
            // Depth-first order with sorted names is the order of the paths' component lists.
            .then_with(|| self.dir.split('/').cmp(other.dir.split('/')))
            .then_with(|| self.name.cmp(&other.name))
    }
}

/// A file a worker hashed.
struct HashedFile {
    dir: Arc<FileNames>,
    index: usize,
    digest: [u8; 32],
    size: u64,
    exec: bool,
}

/// What one worker found.
#[derive(Default)]
struct Output {
    files: Vec<HashedFile>,
    dirs: Vec<String>,
    failures: Vec<Failure>,
}

/// Opens `root` (following a symlink at the root itself), walks everything below it without
/// following symlinks and hashes every regular file; returns the sorted listing and the paths
/// of the files whose owner-execute bit is set.
pub(super) fn scan(
    root: &Path,
    progress: Option<&HashProgress>,
) -> Result<(TreeListing, BTreeSet<String>), TreeError> {
    let root_fd = open_root(root)?;
    let shared = Shared {
        root,
        state: Mutex::new(State {
            stack: vec![Task::Dir(Pending {
                rel: String::new(),
                source: Source::Root(root_fd),
            })],
            listing: 0,
        }),
        wake: Condvar::new(),
        failed: AtomicBool::new(false),
        progress,
    };
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut outputs: Vec<Output> = if workers <= 1 {
        vec![worker(&shared)]
    } else {
        std::thread::scope(|scope| {
            let helpers: Vec<_> = (1..workers)
                .map(|_| scope.spawn(|| worker(&shared)))
                .collect();
            let mut outputs = vec![worker(&shared)];
            for helper in helpers {
                outputs.push(
                    helper
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                );
            }
            outputs
        })
    };

    let mut first: Option<Failure> = None;
    for failure in outputs.iter_mut().flat_map(|o| o.failures.drain(..)) {
        if first
            .as_ref()
            .is_none_or(|f| failure.walk_order(f) == CmpOrdering::Less)
        {
            first = Some(failure);
        }
    }
    if let Some(failure) = first {
        return Err(failure.error);
    }
    // Each worker's files, as records sorted by path, merged into one sorted run.
    let mut files = Vec::new();
    let mut dirs = Vec::new();
    let mut executables = BTreeSet::new();
    for output in outputs {
        let mut records: Vec<FileRecord> = output
            .files
            .into_iter()
            .map(|f| {
                let path = f.dir.path(f.index);
                if f.exec {
                    executables.insert(path.clone());
                }
                FileRecord {
                    path,
                    sha256: hex_digest(&f.digest),
                    size: f.size,
                }
            })
            .collect();
        // Stable sort: it merges the runs already sorted (the files of one directory).
        records.sort_by(|a, b| a.path.cmp(&b.path));
        files = merge(files, records);
        dirs.extend(output.dirs);
    }
    dirs.sort_unstable();
    Ok((TreeListing { files, dirs }, executables))
}

/// Merges two lists of files sorted by path.
fn merge(a: Vec<FileRecord>, b: Vec<FileRecord>) -> Vec<FileRecord> {
    if a.is_empty() {
        return b;
    }
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let next = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if x.path <= y.path => a.next(),
            (Some(_), Some(_)) => b.next(),
            (Some(_), None) => a.next(),
            (None, _) => b.next(),
        };
        match next {
            Some(file) => out.push(file),
            None => return out,
        }
    }
}

impl Shared<'_> {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next piece of work, or `None` when the stack is empty and nobody is listing.
    /// `listed` is true when the caller just finished listing a directory.
    fn next(&self, listed: bool) -> Option<Work> {
        let mut state = self.lock();
        if listed {
            state.listing -= 1;
        }
        loop {
            let st = &mut *state;
            match st.stack.last_mut() {
                Some(Task::Files { dir, next }) => {
                    if *next < dir.names.len() && !self.failed.load(Ordering::Relaxed) {
                        // Several files at a time while many are left (fewer trips through the
                        // lock), one at a time near the end (so that no worker is left alone
                        // with a run of large files).
                        let left = dir.names.len() - *next;
                        let take = (left / CLAIM_DIVISOR).clamp(1, MAX_CLAIM);
                        let work = Work::Files(Arc::clone(dir), *next..*next + take);
                        *next += take;
                        if *next == dir.names.len() {
                            st.stack.pop();
                        }
                        return Some(work);
                    }
                    st.stack.pop();
                }
                Some(Task::Dir(_)) => {
                    if let Some(Task::Dir(pending)) = st.stack.pop() {
                        st.listing += 1;
                        return Some(Work::Dir(pending));
                    }
                }
                None if st.listing == 0 => {
                    drop(state);
                    self.wake.notify_all();
                    return None;
                }
                None => {
                    state = self
                        .wake
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            }
        }
    }

    /// Pushes what listing a directory produced and wakes idle workers.
    fn push(&self, tasks: impl Iterator<Item = Task>) {
        self.lock().stack.extend(tasks);
        self.wake.notify_all();
    }

    fn fail(&self, out: &mut Output, failure: Failure) {
        self.failed.store(true, Ordering::Relaxed);
        out.failures.push(failure);
    }
}

/// One worker: lists directories and hashes files until nothing is left.
fn worker(shared: &Shared<'_>) -> Output {
    let mut buf = vec![0u8; BUFFER_SIZE];
    let mut out = Output::default();
    let mut listed = false;
    while let Some(work) = shared.next(listed) {
        listed = false;
        match work {
            Work::Dir(pending) => {
                listed = true;
                let rel = pending.rel.clone();
                match visit(shared.root, pending, shared.failed.load(Ordering::Relaxed)) {
                    Ok((dir, tasks, files)) => {
                        if let Some(p) = shared.progress {
                            p.found(files);
                        }
                        if let Some(dir) = dir {
                            out.dirs.push(dir);
                        }
                        shared.push(tasks.into_iter());
                    }
                    Err(error) => shared.fail(
                        &mut out,
                        Failure {
                            phase: 0,
                            dir: rel,
                            name: String::new(),
                            error,
                        },
                    ),
                }
            }
            Work::Files(dir, range) => {
                for index in range {
                    if shared.failed.load(Ordering::Relaxed) {
                        break;
                    }
                    if !hash_one(shared, &dir, index, &mut buf, &mut out) {
                        break;
                    }
                }
            }
        }
    }
    out
}

/// Hashes one file of a listed directory into `out`; false if it failed (recorded in `out`).
fn hash_one(
    shared: &Shared<'_>,
    dir: &Listed,
    index: usize,
    buf: &mut [u8],
    out: &mut Output,
) -> bool {
    let name = dir.names.name(index);
    match hash_entry(&dir.fd, name, buf, shared.progress) {
        Ok((digest, size, exec)) => {
            out.files.push(HashedFile {
                dir: Arc::clone(&dir.names),
                index,
                digest,
                size,
                exec,
            });
            true
        }
        Err(failure) => {
            let path = dir.names.path(index);
            let error = match failure {
                FileFailure::Refused(reason) => refused(shared.root, path, reason),
                FileFailure::Io(op, e) => entry_error(shared.root, path, op, e),
            };
            let failure = Failure {
                phase: 1,
                dir: dir.names.rel.clone(),
                name: name.to_owned(),
                error,
            };
            shared.fail(out, failure);
            false
        }
    }
}

/// What listing a directory gives: its relative path (none for the root), the tasks to push and
/// how many files they hold.
type Visited = (Option<String>, Vec<Task>, usize);

/// Opens and lists one directory. Returns its relative path (none for the root), the tasks
/// to push: its subdirectories in reverse order (so that they are taken in name order), then its
/// files (taken first), unless `failed`; and the number of those files.
fn visit(root: &Path, pending: Pending, failed: bool) -> Result<Visited, TreeError> {
    let Pending { rel, source } = pending;
    let fd = match source {
        Source::Root(fd) => fd,
        Source::Child(parent, name_start) => {
            let name = &rel[name_start..];
            match rustix::fs::openat(&parent.fd, name, dir_flags(), Mode::empty()) {
                Ok(fd) => fd,
                Err(e) => return Err(entry_error(root, rel, "open the directory", e)),
            }
        }
    };
    let (subdirs, mut names) = list(root, &fd, &rel)?;
    if failed {
        names = FileNames::default();
    }
    names.rel = rel;
    let listed = Arc::new(Listed {
        fd,
        names: Arc::new(names),
    });
    let rel = &listed.names.rel;
    let mut tasks = Vec::with_capacity(subdirs.len() + 1);
    for name in subdirs.into_iter().rev() {
        let child = join(rel, &name);
        let name_start = child.len() - name.len();
        tasks.push(Task::Dir(Pending {
            rel: child,
            source: Source::Child(Arc::clone(&listed), name_start),
        }));
    }
    let dir = (!rel.is_empty()).then(|| rel.clone());
    let files = listed.names.len();
    if files > 0 {
        tasks.push(Task::Files {
            dir: listed,
            next: 0,
        });
    }
    Ok((dir, tasks, files))
}

/// Opens the root directory, mapping failures to root errors.
fn open_root(root: &Path) -> Result<OwnedFd, TreeError> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    match rustix::fs::open(root, flags, Mode::empty()) {
        Ok(fd) => Ok(fd),
        Err(Errno::NOTDIR) => Err(TreeError::RootNotDirectory {
            root: root.to_path_buf(),
        }),
        Err(e) => Err(TreeError::OpenRoot {
            root: root.to_path_buf(),
            error: e.into(),
        }),
    }
}

/// Maps an error on an entry: `ELOOP` from an `O_NOFOLLOW` open means the entry became a symlink.
fn entry_error(root: &Path, rel: String, op: &'static str, e: Errno) -> TreeError {
    if e == Errno::LOOP {
        refused(root, rel, Refusal::Symlink)
    } else {
        TreeError::Io {
            root: root.to_path_buf(),
            path: rel,
            op,
            error: e.into(),
        }
    }
}

/// `parent/name`, or `name` at the root.
fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_owned()
    } else {
        let mut rel = String::with_capacity(parent.len() + 1 + name.len());
        rel.push_str(parent);
        rel.push('/');
        rel.push_str(name);
        rel
    }
}

/// Lists the directory `fd` (at `parent` relative to the root): returns its subdirectory names
/// and its regular file names (with an empty `rel`), each sorted bytewise. Entries are examined
/// in name order, so the first refusal reported does not depend on the file system's listing
/// order.
fn list(root: &Path, fd: &OwnedFd, parent: &str) -> Result<(Vec<String>, FileNames), TreeError> {
    let list_error = |e: Errno| TreeError::Io {
        root: root.to_path_buf(),
        path: parent.to_owned(),
        op: "list the directory",
        error: e.into(),
    };
    // Every name in one buffer: no allocation per entry.
    let mut text: Vec<u8> = Vec::new();
    let mut entries: Vec<(std::ops::Range<usize>, FileType)> = Vec::new();
    let mut reader = Dir::read_from(fd).map_err(list_error)?;
    while let Some(entry) = reader.read() {
        let entry = entry.map_err(list_error)?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let start = text.len();
        text.extend_from_slice(name);
        entries.push((start..text.len(), entry.file_type()));
    }
    entries.sort_unstable_by(|a, b| text[a.0.clone()].cmp(&text[b.0.clone()]));

    let mut subdirs = Vec::new();
    let mut files = FileNames::default();
    for (range, mut file_type) in entries {
        let name = match std::str::from_utf8(&text[range.clone()]) {
            Ok(name) => name,
            Err(_) => {
                let lossy = String::from_utf8_lossy(&text[range]).into_owned();
                return Err(refused(root, join(parent, &lossy), Refusal::NonUtf8Name));
            }
        };
        if let Some(reason) = name_refusal(name) {
            return Err(refused(root, join(parent, name), reason));
        }
        if file_type == FileType::Unknown {
            // Some file systems do not report types in directory entries.
            match rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => file_type = FileType::from_raw_mode(st.st_mode),
                Err(e) => return Err(entry_error(root, join(parent, name), "stat", e)),
            }
        }
        match file_type {
            FileType::Directory => subdirs.push(name.to_owned()),
            FileType::RegularFile => files.push(name),
            other => {
                let reason = Refusal::for_type(other).unwrap_or(Refusal::OtherType);
                return Err(refused(root, join(parent, name), reason));
            }
        }
    }
    Ok((subdirs, files))
}

/// The refusal for an inadmissible name, if any.
fn name_refusal(name: &str) -> Option<Refusal> {
    name.bytes().find_map(|b| match b {
        b'\n' => Some(Refusal::NewlineInName),
        b'\r' => Some(Refusal::CarriageReturnInName),
        b'\\' => Some(Refusal::BackslashInName),
        _ => None,
    })
}

fn refused(root: &Path, path: String, reason: Refusal) -> TreeError {
    TreeError::Refused {
        root: root.to_path_buf(),
        path,
        reason,
    }
}
