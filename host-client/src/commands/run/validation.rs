//! The harness's `validation` command, run on the host after each iteration, and the
//! `feedback:` it gives the next iteration: the end of what it printed, appended to the prompt.

use crate::engine::{Engine, SandboxId};
use crate::report::EscapedStream;
use anyhow::Context as _;
use pitcrew_core::harness::Harness;
use std::io::Read as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use pitcrew_core::protocol::{keep_end, MAX_FEEDBACK};

/// How long output is still read after the validation command exited (from what it left in
/// the background).
const OUTPUT_GRACE: Duration = Duration::from_secs(1);

/// What the validation command did.
pub(super) struct Validation {
    /// Its exit code (128 + the signal that killed it).
    pub(super) code: i32,
    /// The end of its output (stdout and stderr as they came), when feedback keeps it.
    pub(super) tail: Vec<u8>,
    /// Bytes of output before `tail` that were not kept.
    pub(super) cut: u64,
}

/// Runs the harness's validation command on the host (cwd = the harness directory, its output
/// sent to stderr so `--json` stays clean). It sees `PITCREW_ITERATION`,
/// `PITCREW_RECORD_DIR` (the collected record), `PITCREW_SANDBOX`, `PITCREW_ENGINE` and
/// `PITCREW_SANDBOX_ROOT` (the uploads root inside the sandbox; a host path for the local
/// engine). Its stdout and stderr go through one pipe, shown on stderr as they come (escaped
/// for the terminal), and with `feedback:` their last `h.feedback` bytes are kept.
pub(super) fn run(
    argv: &[String],
    h: &Harness,
    engine: &dyn Engine,
    id: &SandboxId,
    root: &str,
    record_dir: &Path,
) -> anyhow::Result<Validation> {
    let (program, rest) = argv.split_first().context("validation: empty command")?;
    let iteration = record_dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("iteration-"))
        .unwrap_or_default()
        .to_string();
    let mut command = Command::new(program);
    command
        .args(rest)
        .current_dir(&h.base)
        .env("PITCREW_ITERATION", iteration)
        .env("PITCREW_RECORD_DIR", record_dir)
        .env("PITCREW_SANDBOX", &id.0)
        .env("PITCREW_ENGINE", engine.name())
        .env("PITCREW_SANDBOX_ROOT", root)
        .stdin(Stdio::null());
    let cannot = || format!("validation: cannot run {program:?} in {}", h.base.display());
    // Its stdout and stderr through one pipe, shown as they come, escaped: the workspace (the
    // agent's) may have put terminal controls in what it prints.
    let (reader, writer) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(std::io::Error::from)
        .with_context(cannot)?;
    let mut reader = std::fs::File::from(reader);
    command
        .stdout(writer.try_clone().with_context(cannot)?)
        .stderr(writer);
    let mut child = command.spawn().with_context(cannot)?;
    // The parent's ends of the pipe went with `command`'s: EOF once the command and
    // everything it started are done writing.
    drop(command);
    // Read on a thread of its own: a process the command left in the background may hold the
    // pipe open long after the command exited.
    let (chunks, received) = mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) if chunks.send(buf[..n].to_vec()).is_ok() => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                _ => break,
            }
        }
    });
    let keep = h
        .feedback
        .map_or(0, |k| usize::try_from(k).unwrap_or(usize::MAX));
    let mut tail = Tail::new(keep);
    let mut escaped = EscapedStream::default();
    let mut show = |chunk: Vec<u8>| {
        crate::output::write_stderr(format_args!("{}", escaped.push(&chunk)));
        tail.push(&chunk);
    };
    // The command's exit is checked after every chunk too: a background process that keeps
    // writing must not keep the run waiting.
    let status = loop {
        match received.recv_timeout(Duration::from_millis(100)) {
            Ok(chunk) => show(chunk),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break child.wait().with_context(cannot)?,
        }
        if let Some(status) = child.try_wait().with_context(cannot)? {
            break status;
        }
    };
    // What is still in the pipe, for at most OUTPUT_GRACE after the command ended.
    let until = Instant::now() + OUTPUT_GRACE;
    while let Ok(chunk) = received.recv_timeout(until.saturating_duration_since(Instant::now())) {
        show(chunk);
    }
    crate::output::write_stderr(format_args!("{}", escaped.finish()));
    let (tail, cut) = (tail.bytes, tail.cut);
    Ok(Validation {
        code: status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
        tail,
        cut,
    })
}

/// The last `keep` bytes of a stream, and how many came before them.
struct Tail {
    keep: usize,
    bytes: Vec<u8>,
    cut: u64,
}

impl Tail {
    fn new(keep: usize) -> Tail {
        Tail {
            keep,
            bytes: Vec::new(),
            cut: 0,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > self.keep {
            let over = self.bytes.len() - self.keep;
            self.bytes.drain(..over);
            self.cut += over as u64;
        }
    }
}

/// The text appended to the next iteration's prompt after a validation that did not pass:
/// which command, its exit code, and the end of its output (lossy UTF-8, NULs dropped: it
/// travels in an argv element).
pub(super) fn feedback(argv: &[String], v: &Validation) -> String {
    let mut output = String::from_utf8_lossy(&v.tail).replace('\0', "");
    output.truncate(output.trim_end().len());
    let cut = if v.cut > 0 {
        format!(
            " (its last {} bytes; {} before them left out)",
            v.tail.len(),
            v.cut
        )
    } else {
        String::new()
    };
    let mut head = format!(
        "The previous iteration's work did not pass validation: `{}` exited {}. Its output{cut}:\n",
        argv.join(" "),
        v.code,
    );
    if head.len() > MAX_FEEDBACK / 2 {
        // A command line that long says nothing more past its start.
        let mut end = MAX_FEEDBACK / 2;
        while !head.is_char_boundary(end) {
            end -= 1;
        }
        head.truncate(end);
        head.push_str("…\n");
    }
    // Invalid UTF-8 grows in the conversion (a byte becomes a 3-byte U+FFFD): the output is cut
    // again after it, at its start, so that the whole stays within what `run` carries.
    keep_end(&mut output, MAX_FEEDBACK - head.len());
    head + &output
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_bytes_and_counts_the_rest() {
        let mut t = Tail::new(5);
        t.push(b"abc");
        t.push(b"defgh");
        assert_eq!(t.bytes, b"defgh");
        assert_eq!(t.cut, 3);
        t.push(b"ij");
        assert_eq!(t.bytes, b"fghij");
        assert_eq!(t.cut, 5);
    }

    #[test]
    fn feedback_names_the_command_its_code_and_what_was_cut() {
        let v = Validation {
            code: 1,
            tail: b"FAILED test_x\0\n\n".to_vec(),
            cut: 0,
        };
        let argv = ["pytest".to_string(), "-q".to_string()];
        assert_eq!(
            feedback(&argv, &v),
            "The previous iteration's work did not pass validation: `pytest -q` exited 1. Its output:\nFAILED test_x"
        );
        let v = Validation { cut: 10, ..v };
        assert!(feedback(&argv, &v).contains("(its last 16 bytes; 10 before them left out)"));
    }

    #[test]
    fn feedback_stays_within_what_a_run_request_carries() {
        // Invalid UTF-8 triples in size when converted.
        let v = Validation {
            code: 1,
            tail: vec![0xff; 32 * 1024],
            cut: 0,
        };
        let text = feedback(&["check".to_string()], &v);
        assert!(text.len() <= MAX_FEEDBACK, "{}", text.len());
        assert!(text.ends_with('\u{fffd}'));
        let long = vec!["x".repeat(100_000)];
        let text = feedback(
            &long,
            &Validation {
                tail: b"out".to_vec(),
                ..v
            },
        );
        assert!(
            text.len() <= MAX_FEEDBACK && text.ends_with("out"),
            "{}",
            text.len()
        );
    }
}
