//! Ctrl-C (or SIGTERM, SIGHUP) during `pitcrew run`: the first sends `cancel` to the running
//! iteration (the drive loop then collects what there is, stops the sandbox it started and
//! exits 130); the second exits at once, naming the sandbox it leaves running. The handler
//! reaches the connection through a [`CancelSlot`], armed while a connection is open.

use crate::client::Canceller;
use crate::report::escape_controls;
use std::process::ChildStdin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Set by the Ctrl-C handler.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether Ctrl-C was pressed.
pub(super) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Where the Ctrl-C handler finds the canceller of the open connection, if any, and the
/// sandbox an immediate exit would leave running.
#[derive(Clone, Default)]
pub(super) struct CancelSlot(
    Arc<Mutex<Option<Canceller<ChildStdin>>>>,
    Arc<Mutex<Option<String>>>,
);

impl CancelSlot {
    fn lock(&self) -> MutexGuard<'_, Option<Canceller<ChildStdin>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn left(&self) -> MutexGuard<'_, Option<String>> {
        self.1.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// From now on an immediate exit leaves `sandbox` (its id) running, and says so; `None`
    /// once nothing would be left.
    pub(super) fn leaves(&self, sandbox: Option<String>) {
        *self.left() = sandbox;
    }

    /// Ctrl-C from now on cancels through `canceller`.
    pub(super) fn arm(&self, canceller: Canceller<ChildStdin>) {
        *self.lock() = Some(canceller);
    }

    /// Ctrl-C from now on has no connection to cancel through.
    pub(super) fn disarm(&self) {
        self.lock().take();
    }
}

/// Installs the handler of Ctrl-C, SIGTERM and SIGHUP (a warning, not an error, when it cannot
/// be installed).
pub(super) fn install_ctrlc(slot: CancelSlot) {
    let res = ctrlc::set_handler(move || {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            eprintln!("pitcrew: interrupted again; exiting without collecting");
            if let Some(id) = slot.left().as_deref() {
                let id = escape_controls(id);
                eprintln!(
                    "pitcrew: sandbox {id} is left running (pitcrew collect {id}; pitcrew down {id})"
                );
            }
            std::process::exit(130);
        }
        eprintln!("pitcrew: interrupted; cancelling the iteration (Ctrl-C again to quit now)");
        let guard = slot.lock();
        if let Some(c) = guard.as_ref() {
            if let Err(e) = c.cancel() {
                eprintln!("pitcrew: cancel: {}", escape_controls(&e.to_string()));
            }
        }
    });
    if let Err(e) = res {
        tracing::warn!("cannot install the Ctrl-C handler: {e}");
    }
}
