//! Ctrl-C (or SIGTERM, SIGHUP) during `pitcrew run`: the first sends `cancel` to the running
//! iteration (the drive loop then collects what there is, stops the sandbox it started and
//! exits 130); the second exits at once, naming the sandbox it leaves running. The handler
//! reaches the connection through a [`CancelSlot`], armed while a connection is open.
//!
//! A closed stdout or stderr ([`crate::output`]) is the first signal's path too: the iteration
//! is cancelled, collected, the sandbox stopped, and the run exits 141 instead. It is not a
//! signal: a signal after it is still the first.

use crate::client::Canceller;
use crate::output::{self, errln};
use crate::report::escape_controls;
use std::process::ChildStdin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Set by the Ctrl-C handler.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether Ctrl-C was pressed, or an output of pitcrew's found closed: the run ends.
pub(super) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst) || output::gone()
}

/// The exit code of a run that ended so: [`output::GONE_EXIT`] when an output was found closed,
/// else 130.
pub(super) fn interrupted_code() -> u8 {
    if output::gone() {
        output::GONE_EXIT
    } else {
        130
    }
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

    /// Cancels the running iteration through the armed connection, if any.
    fn cancel(&self) {
        let sent = self.lock().as_ref().map(Canceller::cancel);
        if let Some(Err(e)) = sent {
            errln!("pitcrew: cancel: {}", escape_controls(&e.to_string()));
        }
    }
}

/// Installs the handler of Ctrl-C, SIGTERM and SIGHUP (a warning, not an error, when it cannot
/// be installed), and the same cancel when stdout or stderr is found closed, watched from now
/// on.
pub(super) fn install_ctrlc(slot: CancelSlot) {
    let on_gone = slot.clone();
    output::on_gone(move || {
        errln!("pitcrew: stdout or stderr closed; cancelling the iteration");
        on_gone.cancel();
    });
    output::watch();
    let res = ctrlc::set_handler(move || {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            errln!("pitcrew: interrupted again; exiting without collecting");
            if let Some(id) = slot.left().as_deref() {
                let id = escape_controls(id);
                errln!(
                    "pitcrew: sandbox {id} is left running (pitcrew collect {id}; pitcrew down {id})"
                );
            }
            std::process::exit(i32::from(interrupted_code()));
        }
        errln!("pitcrew: interrupted; cancelling the iteration (Ctrl-C again to quit now)");
        slot.cancel();
    });
    if let Err(e) = res {
        tracing::warn!("cannot install the Ctrl-C handler: {e}");
    }
}
