//! The directory walk: lists every entry below the root without following symlinks and refuses
//! anything that is not a regular file or a directory (or has an inadmissible name).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::error::{Refusal, TreeError};

/// How many directory descriptors a walk keeps open for the hashing phase; files in other
/// directories are reached again from the root, component by component, without following links.
const RETAINED_DIR_FDS: usize = 256;

/// Flags for every directory below the root.
pub(super) fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// A directory found by the walk.
pub(super) struct PlanDir {
    /// Relative path without `./`; empty for the root.
    pub rel: String,
    /// The open directory, if it was retained.
    pub fd: Option<OwnedFd>,
}

/// A regular file found by the walk.
pub(super) struct PlanFile {
    /// Relative path without `./`.
    pub rel: String,
    /// Byte offset of the file name in `rel`.
    pub name_start: usize,
    /// Index of the parent in [`Plan::dirs`].
    pub dir: usize,
}

impl PlanFile {
    /// The file name within its directory.
    pub fn name(&self) -> &str {
        &self.rel[self.name_start..]
    }
}

/// What the walk found: `dirs[0]` is the root (always retained); files are in walk order, the
/// files of one directory next to each other.
pub(super) struct Plan {
    /// All directories, the root first.
    pub dirs: Vec<PlanDir>,
    /// All regular files.
    pub files: Vec<PlanFile>,
}

impl Plan {
    /// The root directory descriptor.
    pub fn root_fd(&self) -> Option<BorrowedFd<'_>> {
        self.dirs
            .first()
            .and_then(|d| d.fd.as_ref())
            .map(|fd| fd.as_fd())
    }
}

/// One directory being walked: its descriptor and the subdirectories still to visit.
struct Frame {
    dir: usize,
    fd: OwnedFd,
    retained: bool,
    subdirs: std::vec::IntoIter<String>,
}

/// Opens `root` (following a symlink at the root itself) and lists everything below it.
pub(super) fn walk(root: &Path) -> Result<Plan, TreeError> {
    let root_fd = open_root(root)?;
    let mut plan = Plan {
        dirs: vec![PlanDir {
            rel: String::new(),
            fd: None,
        }],
        files: Vec::new(),
    };
    let subdirs = list(root, &root_fd, 0, &mut plan)?;
    let mut stack = vec![Frame {
        dir: 0,
        fd: root_fd,
        retained: true,
        subdirs: subdirs.into_iter(),
    }];
    let mut retained = 1usize;
    while let Some(frame) = stack.last_mut() {
        let Some(name) = frame.subdirs.next() else {
            if let Some(done) = stack.pop() {
                if done.retained {
                    plan.dirs[done.dir].fd = Some(done.fd);
                }
            }
            continue;
        };
        let rel = join(&plan.dirs[frame.dir].rel, &name);
        let fd = match rustix::fs::openat(&frame.fd, name.as_str(), dir_flags(), Mode::empty()) {
            Ok(fd) => fd,
            Err(e) => return Err(entry_error(root, rel, "open the directory", e)),
        };
        let index = plan.dirs.len();
        plan.dirs.push(PlanDir { rel, fd: None });
        let subdirs = list(root, &fd, index, &mut plan)?;
        let keep = retained < RETAINED_DIR_FDS;
        retained += usize::from(keep);
        stack.push(Frame {
            dir: index,
            fd,
            retained: keep,
            subdirs: subdirs.into_iter(),
        });
    }
    Ok(plan)
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
pub(super) fn entry_error(root: &Path, rel: String, op: &'static str, e: Errno) -> TreeError {
    if e == Errno::LOOP {
        TreeError::Refused {
            root: root.to_path_buf(),
            path: rel,
            reason: Refusal::Symlink,
        }
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

/// The refusal for a file type that is neither a regular file nor a directory.
pub(super) fn type_refusal(file_type: FileType) -> Option<Refusal> {
    match file_type {
        FileType::RegularFile => None,
        FileType::Directory => Some(Refusal::Directory),
        FileType::Symlink => Some(Refusal::Symlink),
        FileType::Fifo => Some(Refusal::Fifo),
        FileType::Socket => Some(Refusal::Socket),
        FileType::BlockDevice => Some(Refusal::BlockDevice),
        FileType::CharacterDevice => Some(Refusal::CharDevice),
        _ => Some(Refusal::OtherType),
    }
}

/// Lists the directory `fd` (index `dir` of the plan): records its regular files in the plan and
/// returns its subdirectory names, sorted bytewise. Entries are examined in name order, so the
/// first refusal reported does not depend on the file system's listing order.
fn list(root: &Path, fd: &OwnedFd, dir: usize, plan: &mut Plan) -> Result<Vec<String>, TreeError> {
    let parent = plan.dirs[dir].rel.clone();
    let list_error = |e: Errno| TreeError::Io {
        root: root.to_path_buf(),
        path: parent.clone(),
        op: "list the directory",
        error: e.into(),
    };
    let mut entries: Vec<(Vec<u8>, FileType)> = Vec::new();
    let mut reader = Dir::read_from(fd).map_err(list_error)?;
    while let Some(entry) = reader.read() {
        let entry = entry.map_err(list_error)?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        entries.push((name.to_vec(), entry.file_type()));
    }
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));

    let mut subdirs = Vec::new();
    for (name, mut file_type) in entries {
        let name = match String::from_utf8(name) {
            Ok(name) => name,
            Err(e) => {
                let lossy = String::from_utf8_lossy(e.as_bytes()).into_owned();
                return Err(refused(root, join(&parent, &lossy), Refusal::NonUtf8Name));
            }
        };
        let rel = join(&parent, &name);
        if let Some(reason) = name_refusal(&name) {
            return Err(refused(root, rel, reason));
        }
        if file_type == FileType::Unknown {
            // Some file systems do not report types in directory entries.
            match rustix::fs::statat(fd, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => file_type = FileType::from_raw_mode(st.st_mode),
                Err(e) => return Err(entry_error(root, rel, "stat", e)),
            }
        }
        match file_type {
            FileType::Directory => subdirs.push(name),
            FileType::RegularFile => plan.files.push(PlanFile {
                name_start: rel.len() - name.len(),
                rel,
                dir,
            }),
            other => {
                let reason = type_refusal(other).unwrap_or(Refusal::OtherType);
                return Err(refused(root, rel, reason));
            }
        }
    }
    Ok(subdirs)
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
