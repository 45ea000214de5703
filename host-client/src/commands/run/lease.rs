//! The run's claim is a lease the sandbox's supervisor orphans after `--lease` without word
//! from the host: a host that hangs without closing its connection (stopped, its machine
//! suspended, a remote engine's stream left open) then leaves an orphan `--resume` can finish.
//! While the claim is held a thread sends `renew` four times per lease (every other frame
//! renews it too); it is stopped before the connection closes.

use crate::client::Canceller;
use std::process::ChildStdin;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

/// How many renewals are sent per lease.
const RENEWALS_PER_LEASE: u32 = 4;

/// The longest `--lease`.
const MAX_LEASE: Duration = Duration::from_secs(24 * 3600);

/// Parses `--lease`: a duration from 1 s to 24 h (`90`, `90s`, `15m`, `2h`).
pub(super) fn parse_lease(s: &str) -> Result<Duration, String> {
    let lease = pitcrew_core::harness::parse_duration_at_most(s, MAX_LEASE)
        .map_err(|e| format!("{e}; the lease is from 1s to 24h"))?;
    if lease < Duration::from_secs(1) {
        return Err(format!(
            "{s:?}: the lease is how long the sandbox waits without word from this pitcrew run \
             before it orphans the run (for `pitcrew run --resume`); it is from 1s to 24h"
        ));
    }
    Ok(lease)
}

/// The thread renewing a claim; stopped (and joined) when dropped.
pub(super) struct Heartbeat {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Heartbeat {
    /// Renews the claim through `renewer` every `lease / 4` until dropped, or until a renewal
    /// cannot be sent (the connection is gone: the run's own requests will say so).
    pub(super) fn start(renewer: Canceller<ChildStdin>, lease: Duration) -> Heartbeat {
        let every = lease / RENEWALS_PER_LEASE;
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || loop {
            match stopped.recv_timeout(every) {
                Err(RecvTimeoutError::Timeout) => {
                    if let Err(err) = renewer.renew() {
                        tracing::debug!("lease: renew: {err}");
                        return;
                    }
                }
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
        });
        Heartbeat {
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_a_duration_from_a_second_to_a_day() {
        assert_eq!(parse_lease("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_lease("2m"), Ok(Duration::from_secs(120)));
        for bad in ["500ms", "25h", "soon"] {
            assert!(parse_lease(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_lease_too_short_says_what_the_lease_is_not_a_timeout() {
        for short in ["0s", "0", "500ms"] {
            let err = parse_lease(short).unwrap_err();
            assert!(err.contains("how long the sandbox waits"), "{short}: {err}");
            assert!(err.contains("from 1s to 24h"), "{short}: {err}");
            assert!(!err.contains("timeout"), "{short}: {err}");
        }
        let err = parse_lease("25h").unwrap_err();
        assert!(err.contains("from 1s to 24h"), "{err}");
    }
}
