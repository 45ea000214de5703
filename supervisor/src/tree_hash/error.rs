//! Why a tree or a file cannot be hashed.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why an entry is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// A symbolic link (never followed).
    Symlink,
    /// A named pipe.
    Fifo,
    /// A unix socket.
    Socket,
    /// A block device node.
    BlockDevice,
    /// A character device node.
    CharDevice,
    /// A directory where a regular file was expected.
    Directory,
    /// Some other kind of file the platform reports.
    OtherType,
    /// The name contains a line feed.
    NewlineInName,
    /// The name contains a carriage return.
    CarriageReturnInName,
    /// The name contains a backslash.
    BackslashInName,
    /// The name is not valid UTF-8.
    NonUtf8Name,
}

impl Refusal {
    /// The rule an entry broke, for a tree walk.
    pub fn tree_rule(self) -> &'static str {
        match self {
            Refusal::Symlink => "symlinks are refused anywhere below the root",
            Refusal::Fifo
            | Refusal::Socket
            | Refusal::BlockDevice
            | Refusal::CharDevice
            | Refusal::Directory
            | Refusal::OtherType => "only regular files and directories are allowed",
            Refusal::NewlineInName | Refusal::CarriageReturnInName | Refusal::BackslashInName => {
                "sha256sum escapes such names, so the tree hash could not be checked in a shell"
            }
            Refusal::NonUtf8Name => "names must be UTF-8, manifests are JSON",
        }
    }

    /// The rule an entry broke, for a single file.
    pub fn file_rule(self) -> &'static str {
        match self {
            Refusal::Symlink => "symlinks are not followed",
            _ => "only regular files can be hashed",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::Symlink => "is a symlink",
            Refusal::Fifo => "is a fifo",
            Refusal::Socket => "is a socket",
            Refusal::BlockDevice => "is a block device",
            Refusal::CharDevice => "is a character device",
            Refusal::Directory => "is a directory",
            Refusal::OtherType => "is neither a regular file nor a directory",
            Refusal::NewlineInName => "has a line feed in its name",
            Refusal::CarriageReturnInName => "has a carriage return in its name",
            Refusal::BackslashInName => "has a backslash in its name",
            Refusal::NonUtf8Name => "has a name that is not valid UTF-8",
        })
    }
}

/// A tree or file that cannot be hashed. Every variant names the path; `Display` is one line.
///
/// Paths below the root are shown as `./<rel>` with control characters escaped.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    /// The root cannot be opened as a directory (missing, unreadable, …).
    #[error("tree {}: cannot open the directory: {error}", root.display())]
    OpenRoot {
        /// The root as given.
        root: PathBuf,
        /// Why.
        error: io::Error,
    },
    /// The root exists but is not a directory.
    #[error("tree {}: not a directory", root.display())]
    RootNotDirectory {
        /// The root as given.
        root: PathBuf,
    },
    /// An entry below the root is refused.
    #[error("tree {}: {} {reason} ({})", root.display(), shown(path), reason.tree_rule())]
    Refused {
        /// The root as given.
        root: PathBuf,
        /// The entry, relative to the root, without `./` (lossy if not UTF-8).
        path: String,
        /// Why.
        reason: Refusal,
    },
    /// An I/O error on an entry below the root.
    #[error("tree {}: {}: cannot {op}: {error}", root.display(), shown(path))]
    Io {
        /// The root as given.
        root: PathBuf,
        /// The entry, relative to the root, without `./` (empty for the root itself).
        path: String,
        /// What was attempted ("open", "read", "list", …).
        op: &'static str,
        /// Why.
        error: io::Error,
    },
    /// A single file that is refused.
    #[error("file {}: {reason} ({})", path.display(), reason.file_rule())]
    FileRefused {
        /// The path as given.
        path: PathBuf,
        /// Why.
        reason: Refusal,
    },
    /// An I/O error on a single file.
    #[error("file {}: cannot {op}: {error}", path.display())]
    FileIo {
        /// The path as given.
        path: PathBuf,
        /// What was attempted.
        op: &'static str,
        /// Why.
        error: io::Error,
    },
}

impl TreeError {
    /// The path the error is about: the root or file as given, or `root/<rel>` below a root.
    pub fn path(&self) -> PathBuf {
        match self {
            TreeError::OpenRoot { root, .. } | TreeError::RootNotDirectory { root } => root.clone(),
            TreeError::Refused { root, path, .. } | TreeError::Io { root, path, .. } => {
                root.join(path)
            }
            TreeError::FileRefused { path, .. } | TreeError::FileIo { path, .. } => path.clone(),
        }
    }
}

/// `./<rel>` (or `.`) with `\n`, `\r` and other control characters escaped, so that the message
/// stays on one line.
fn shown(rel: &str) -> String {
    let mut out = String::with_capacity(rel.len() + 2);
    out.push('.');
    if !rel.is_empty() {
        out.push('/');
    }
    for c in rel.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

impl Refusal {
    /// The refusal for a file type that is neither a regular file nor a directory (`None` for a
    /// regular file).
    pub fn for_type(file_type: rustix::fs::FileType) -> Option<Refusal> {
        use rustix::fs::FileType;
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
}
