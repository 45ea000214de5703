//! `throttle BYTES_PER_SECOND`: copies stdin to stdout no faster than the rate, as a network
//! link of that bandwidth between two TCP sockets would. What is written waits in a send
//! buffer of [`BUFFER`] chunks (the writer blocks once it is full); the link carries one chunk
//! (at most 16 KiB) at a time, taking the time the rate gives it, counted from when the link
//! took the chunk up; what it carried waits in a receive buffer of [`BUFFER`] chunks until the
//! reader takes it (the link stops while that one is full). A pause earns no credit beyond
//! [`SLACK`] (which only makes up for sleeping longer than asked). `pv -L` does not work that
//! way: after a pause it lets up to five seconds' worth of bytes through at once, so a transfer
//! of a few megabytes that follows any work (an upload's listing after the host hashed its
//! tree) crossed a "20 MB/s" `pv` pipe in milliseconds. The upload benchmark's throttled
//! transport (`benches/upload.rs`).

use std::io::{ErrorKind, Read, Write};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The most bytes carried as one chunk: about 0.8 ms at 20 MiB/s.
const CHUNK: usize = 16 * 1024;

/// Each socket buffer, in chunks: 64, 1 MiB.
const BUFFER: usize = 64;

/// How far behind the clock the link may fall and catch up: a sleep that overran, a read that
/// waited a moment. About 40 KiB at 20 MiB/s.
const SLACK: Duration = Duration::from_millis(2);

fn main() -> ExitCode {
    let rate = match std::env::args().nth(1).map(|r| r.parse::<u64>()) {
        Some(Ok(rate)) if rate > 0 => rate as f64,
        _ => {
            eprintln!("usage: throttle BYTES_PER_SECOND (a positive whole number)");
            return ExitCode::from(2);
        }
    };
    let (to_link, sending) = mpsc::sync_channel::<Vec<u8>>(BUFFER);
    let (to_reader, received) = mpsc::sync_channel::<Vec<u8>>(BUFFER);
    let sender = std::thread::spawn(move || -> std::io::Result<()> {
        let mut input = std::io::stdin().lock();
        loop {
            let mut buf = vec![0u8; CHUNK];
            let n = match input.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            buf.truncate(n);
            if to_link.send(buf).is_err() {
                return Ok(());
            }
        }
    });
    let link = std::thread::spawn(move || {
        let mut free_at = Instant::now();
        for chunk in sending {
            let now = Instant::now();
            let earliest = now.checked_sub(SLACK).unwrap_or(now);
            free_at = free_at.max(earliest) + Duration::from_secs_f64(chunk.len() as f64 / rate);
            std::thread::sleep(free_at.saturating_duration_since(Instant::now()));
            if to_reader.send(chunk).is_err() {
                return;
            }
        }
    });
    let mut output = std::io::stdout().lock();
    for chunk in received {
        if let Err(e) = output.write_all(&chunk).and_then(|()| output.flush()) {
            eprintln!("throttle: writing stdout: {e}");
            return ExitCode::FAILURE;
        }
    }
    let _ = link.join();
    match sender.join() {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("throttle: reading stdin: {e}");
            ExitCode::FAILURE
        }
        Err(_) => ExitCode::FAILURE,
    }
}
