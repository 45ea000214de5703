//! Test fixture (`tests/tests/unprivileged.rs`): a process whose main thread leaves through
//! exit(2), not exit_group(2), while another thread appends a byte to the file named by its
//! argument every 50 ms. Its leader then shows `State: Z` in `/proc` although the process runs
//! on: a reap that skipped zombies would leave it alive.

use std::io::Write as _;
use std::time::Duration;

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: leaderless FILE");
        std::process::exit(2);
    };
    // SAFETY: setsid takes no arguments (it fails harmlessly for a group leader).
    unsafe {
        libc::setsid();
    }
    std::thread::spawn(move || loop {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        {
            let _ = f.write_all(b".");
        }
        std::thread::sleep(Duration::from_millis(50));
    });
    std::thread::sleep(Duration::from_millis(100));
    // SAFETY: exit(2) ends the calling thread only; nothing of it is used afterwards.
    unsafe {
        libc::syscall(libc::SYS_exit, 0);
    }
}
