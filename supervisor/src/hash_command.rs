//! `hash DIR [--format …] [--json]`, shared by `pitcrew hash` and `pitcrew-init hash`.
//!
//! Plain output is one line, `<hex digest>  <DIR>`. If `DIR` is a regular file (not a symlink),
//! its plain SHA-256 is printed instead (format `sha256` in JSON).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;

use crate::tree_hash::{self, FileRecord, TreeFormat};

/// Arguments of the `hash` subcommand.
#[derive(Debug, clap::Args)]
pub struct HashArgs {
    /// The directory to hash (the root itself may be a symlink to a directory), or a regular file.
    pub dir: PathBuf,
    /// The tree digest format.
    #[arg(long, value_enum, default_value_t = TreeFormat::PiTreeV1)]
    pub format: TreeFormat,
    /// Print a JSON document with the digest and the full listing instead of one line.
    #[arg(long)]
    pub json: bool,
}

/// The `--json` document for a directory.
#[derive(Debug, Serialize)]
struct TreeJson<'a> {
    path: &'a Path,
    format: TreeFormat,
    sha256: &'a str,
    files: &'a [FileRecord],
    dirs: &'a [String],
    file_count: usize,
    total_bytes: u64,
}

/// The `--json` document for a single file.
#[derive(Debug, Serialize)]
struct FileJson<'a> {
    path: &'a Path,
    format: &'static str,
    sha256: &'a str,
    size: u64,
}

/// Runs the `hash` subcommand, printing to `stdout` (the process's, or the host's writer that
/// notes a closed one).
pub fn run(args: &HashArgs, stdout: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let is_file = std::fs::symlink_metadata(&args.dir).is_ok_and(|m| m.file_type().is_file());
    let out = if is_file {
        let record = tree_hash::sha256_file(&args.dir).context("cannot hash the file")?;
        if args.json {
            json_line(&FileJson {
                path: &args.dir,
                format: "sha256",
                sha256: &record.sha256,
                size: record.size,
            })?
        } else {
            format!("{}  {}\n", record.sha256, args.dir.display())
        }
    } else {
        let digest =
            tree_hash::hash_tree(&args.dir, args.format).context("cannot hash the tree")?;
        if args.json {
            json_line(&TreeJson {
                path: &args.dir,
                format: digest.format,
                sha256: &digest.sha256,
                files: &digest.listing.files,
                dirs: &digest.listing.dirs,
                file_count: digest.listing.files.len(),
                total_bytes: digest.listing.total_bytes(),
            })?
        } else {
            format!("{}  {}\n", digest.sha256, args.dir.display())
        }
    };
    stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .context("cannot write to stdout")?;
    Ok(ExitCode::SUCCESS)
}

fn json_line<T: Serialize>(value: &T) -> anyhow::Result<String> {
    let mut text = serde_json::to_string_pretty(value).context("cannot encode JSON")?;
    text.push('\n');
    Ok(text)
}
