//! What watches a running iteration: the trait the wait loop calls back into while the
//! agent runs, so the long-lived mode can serve its connections without a second thread.
//!
//! It lives on the process side, below both [`crate::iteration`] (which passes an observer
//! through the steps) and [`super::wait`] (which polls its descriptors), so neither
//! depends on the other for it.

use super::state::Supervisor;
use crate::protocol::events::{EventDetail, Step, StepState};
use std::os::fd::BorrowedFd;
use std::time::Duration;

/// What an observer asks the running iteration to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObserverAction {
    /// Send this signal to the agent's process group.
    Signal(i32),
    /// Cancel: SIGTERM to the agent's group, SIGKILL after `kill_grace_ms`; the record's reason
    /// becomes `cancelled: <text>`.
    Cancel(String),
}

/// Watches an iteration and keeps other work going while the agent runs, without threads: the
/// wait loop polls [`IterationObserver::poll_fds`] with its signalfd and calls
/// [`IterationObserver::on_ready`] and [`IterationObserver::on_tick`] after every wake-up.
/// `pitcrew-init run` passes [`NoopObserver`]; the long-lived mode passes its server, so both run
/// the same code path.
pub trait IterationObserver {
    /// A step `started` or `finished`, with details.
    fn step(&mut self, _step: Step, _state: StepState, _detail: EventDetail) {}
    /// Called once the iteration's first reap has left nothing of an earlier agent running:
    /// the observer opens what the iteration needs (the egress listeners, at ports no leftover
    /// can hold any more). `Err` is the iteration's reason.
    fn after_reap(&mut self, _manifest: &crate::manifest::Manifest) -> Result<(), String> {
        Ok(())
    }
    /// Descriptors to wait on (readable) while the agent runs.
    fn poll_fds(&self) -> Vec<BorrowedFd<'_>> {
        Vec::new()
    }
    /// Called after every wake-up of the wait loop (and once before launch): service the
    /// descriptors and return actions for the agent.
    fn on_ready(&mut self, _ctx: &mut Supervisor) -> Vec<ObserverAction> {
        Vec::new()
    }
    /// Called after every wake-up of the wait loop, after [`IterationObserver::on_ready`].
    fn on_tick(&mut self) {}
    /// The longest the wait loop may sleep between calls.
    fn max_wait(&self) -> Duration {
        Duration::from_secs(1)
    }
    /// Descriptors to wait on for room to write while the agent runs (the egress
    /// connections with bytes for the agent).
    fn poll_out_fds(&self) -> Vec<BorrowedFd<'_>> {
        Vec::new()
    }
    /// Variables the environment step sets as pins for this iteration (the egress proxy's
    /// address, [`crate::environment::network_pins`]).
    fn network_pins(&self) -> Vec<crate::environment::IterationPin> {
        Vec::new()
    }
    /// The model listener's URL (`http://127.0.0.1:<port>`) when the iteration's model route
    /// has one: where the supervisor's own `models.json` points a pi built-in provider
    /// ([`crate::pi_model_route`]).
    fn model_listener_url(&self) -> Option<String> {
        None
    }
    /// The agent's own network namespace for this iteration, when the observer made one (its
    /// listeners are bound in it, [`super::netns::AgentNamespace`]); the launch makes one
    /// itself when it needs one and the observer has none.
    fn agent_namespace(&self) -> Option<BorrowedFd<'_>> {
        None
    }
    /// Where the run's context-file baseline is kept from one iteration to the next
    /// ([`crate::context_files::Baseline`]: emptied when the workspace is uploaded or the
    /// manifest set); `None` for an observer that keeps none (each iteration takes its own).
    fn context_baseline(&mut self) -> Option<&mut Option<crate::context_files::Baseline>> {
        None
    }
}

/// An observer that does nothing (the one-shot `pitcrew-init run`).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopObserver;

impl IterationObserver for NoopObserver {}
