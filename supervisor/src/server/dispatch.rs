//! Request dispatch: complete frames taken from a connection, control requests checked against
//! the protocol's order and busy rules and answered, refusals as [`RequestError`]s.

use super::conn::TarFrames;
use super::egress::HostSays;
use super::error::RequestError;
use super::{records, PendingRun, PendingShutdown, Server};
use crate::exit_code;
use crate::iteration::{ObserverAction, Supervisor};
use crate::protocol::{detail, AgentSignal, Frame, FrameKind, Request, Response, PROTOCOL_VERSION};
use serde_json::Value;

/// The signal number of a signal the host may send to the agent.
fn signal_number(s: AgentSignal) -> i32 {
    match s {
        AgentSignal::Sigint => libc::SIGINT,
        AgentSignal::Sigterm => libc::SIGTERM,
        AgentSignal::Sigkill => libc::SIGKILL,
        AgentSignal::Sighup => libc::SIGHUP,
        AgentSignal::Sigusr1 => libc::SIGUSR1,
        AgentSignal::Sigusr2 => libc::SIGUSR2,
    }
}

/// Best-effort `id` of a control payload that did not parse as a request.
fn salvage_id(payload: &[u8]) -> u64 {
    serde_json::from_slice::<Value>(payload)
        .ok()
        .and_then(|v| v.get("id").and_then(Value::as_u64))
        .unwrap_or(0)
}

impl Server {
    /// Handles every complete frame of connection `i`.
    pub(super) fn drain_frames(&mut self, i: usize, ctx: &mut Supervisor) {
        loop {
            if self.conns[i].dead {
                return;
            }
            let frame = match self.conns[i].decoder.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(err) => {
                    let c = &mut self.conns[i];
                    c.error(0, err.into());
                    c.dead = true;
                    return;
                }
            };
            match frame.kind {
                FrameKind::Data if frame.channel == crate::protocol::Channel::Tunnel => {
                    let conn_id = self.conns[i].id;
                    match crate::protocol::tunnel::decode(&frame.payload) {
                        Some((conn, bytes)) => self.tunnel_says(
                            conn_id,
                            HostSays::Data {
                                conn,
                                bytes: bytes.to_vec(),
                            },
                        ),
                        None => self.conns[i].error(
                            0,
                            RequestError::Malformed(
                                "a channel-5 frame shorter than its connection id".into(),
                            ),
                        ),
                    }
                }
                FrameKind::Data => self.on_data(i, frame),
                FrameKind::Control => self.on_control(i, &frame, ctx),
            }
            // Every frame from the claim's holder is word from its host.
            self.claim_renewed(self.conns[i].id);
        }
        let c = &mut self.conns[i];
        if c.eof && c.decoder.pending() > 0 {
            let pending = c.decoder.pending();
            c.error(
                0,
                RequestError::Malformed(format!(
                    "the stream ended inside a frame ({pending} bytes pending)"
                )),
            );
            c.dead = true;
        }
    }

    /// Handles one control frame of connection `i`; a refused request is answered with its
    /// `error`.
    fn on_control(&mut self, i: usize, frame: &Frame, ctx: &mut Supervisor) {
        let request: Request = match frame.json() {
            Ok(r) => r,
            Err(err) => {
                let id = salvage_id(&frame.payload);
                self.conns[i].error(id, err.into());
                return;
            }
        };
        let id = request.id();
        // A carried connection's messages come by the thousand: routed at once, without the
        // per-request checks (the tunnel's connection said hello before its claim).
        let conn_id = self.conns[i].id;
        let request = match request {
            Request::TunnelOpened { conn } => {
                return self.tunnel_says(conn_id, HostSays::Opened { conn })
            }
            Request::TunnelRefused { conn, reason } => {
                return self.tunnel_says(conn_id, HostSays::Refused { conn, reason })
            }
            Request::TunnelClose { conn, reason } => {
                return self.tunnel_says(conn_id, HostSays::Close { conn, reason })
            }
            Request::TunnelAck { conn, bytes } => {
                return self.tunnel_says(conn_id, HostSays::Ack { conn, bytes })
            }
            Request::TunnelInjected { conn, names } => {
                return self.tunnel_says(conn_id, HostSays::Injected { conn, names })
            }
            other => other,
        };
        if let Err(err) = self.handle(i, request, ctx) {
            self.conns[i].error(id, err);
        }
    }

    /// Answers `request` of connection `i`, or says why it is refused.
    fn handle(
        &mut self,
        i: usize,
        request: Request,
        ctx: &mut Supervisor,
    ) -> Result<(), RequestError> {
        let id = request.id();
        if !self.conns[i].hello && !matches!(request, Request::Hello { .. }) {
            return Err(RequestError::Order(
                "the first request must be hello".into(),
            ));
        }
        let running = self.current.is_some();
        let conn_id = self.conns[i].id;
        // A directory of the supervisor's uid on its paths given a mode that locks it out
        // (unprivileged mode: the agent owns them) gets its mode back before any request uses
        // it; after every reap the iteration does the same and records it.
        if let Some(found) = ctx.restore_own_state() {
            tracing::warn!("own state set back before a request: {found:?}");
        }
        match request {
            Request::Hello { versions, .. } => {
                if !versions.contains(&PROTOCOL_VERSION) {
                    return Err(RequestError::Version(format!(
                        "no common protocol version: host speaks {versions:?}, supervisor speaks [{PROTOCOL_VERSION}]"
                    )));
                }
                let c = &mut self.conns[i];
                c.hello = true;
                c.send(&Response::Hello {
                    id,
                    version: PROTOCOL_VERSION,
                    supervisor: format!("pitcrew-init {}", env!("CARGO_PKG_VERSION")),
                    capabilities: Box::new(self.capabilities.clone()),
                });
            }
            Request::Upload {
                dest,
                owner,
                offer,
                compression,
                listing,
                ..
            } => {
                // The uploads root and its parents: held before the first upload writes there.
                if let Some(parent) = std::path::Path::new(&dest).parent() {
                    if let Err(why) = ctx.owned_dirs.guard(parent) {
                        self.conns[i].upload = super::conn::Upload::Draining;
                        return Err(RequestError::Refused(format!("dest {dest}: {why}")));
                    }
                }
                self.start_upload(
                    i,
                    id,
                    super::upload::UploadAsk {
                        dest: &dest,
                        owner,
                        offer,
                        compression: compression.as_deref(),
                        named: listing,
                    },
                )?
            }
            Request::SetManifest {
                mut manifest,
                listings_follow,
                ..
            } => {
                self.check_claim(conn_id, "set_manifest")?;
                if running {
                    return Err(RequestError::Busy("an iteration is running".into()));
                }
                manifest
                    .validate()
                    .map_err(|err| RequestError::Malformed(err.to_string()))?;
                if let Some(me) = &self.capabilities.agent_user {
                    let asked = &manifest.user;
                    if (asked.uid, asked.gid) != (me.uid, me.gid) {
                        return Err(RequestError::Refused(format!(
                            "manifest user {}:{}: this supervisor runs unprivileged as {}:{} and \
                             can run the agent only as that (hello's agent_user)",
                            asked.uid, asked.gid, me.uid, me.gid
                        )));
                    }
                }
                // The earlier manifest's listings are replaced: it is gone even if this fails.
                // So is the context-file baseline: the next iteration takes the new run's.
                self.manifest = None;
                self.context_baseline = None;
                self.store_listings(&mut manifest, listings_follow)?;
                self.conns[i].send(&Response::ok(
                    id,
                    &detail::ManifestSet {
                        files: manifest.files.len() as u64,
                        trees: manifest.trees.len() as u64,
                    },
                ));
                self.manifest = Some(*manifest);
                self.claim_ready(conn_id);
                self.prune_collected();
            }
            Request::AddListing {
                tree,
                files,
                dirs,
                last,
                held_listing,
                ..
            } => {
                self.check_claim(conn_id, "add_listing")?;
                if running {
                    return Err(RequestError::Busy("an iteration is running".into()));
                }
                let added = match held_listing {
                    None => self.add_listing(&tree, &files, &dirs, last)?,
                    Some(digest) => {
                        if !files.is_empty() || !dirs.is_empty() || !last {
                            return Err(RequestError::Malformed(
                                "add_listing with held_listing carries no files or dirs and is \
                                 the tree's last part"
                                    .into(),
                            ));
                        }
                        self.add_held_listing(&tree, &digest)?
                    }
                };
                self.conns[i].send(&Response::ok(id, &added));
            }
            Request::Run { feedback, .. } => {
                self.check_claim(conn_id, "run")?;
                if let Some(f) = &feedback {
                    if f.len() > crate::protocol::MAX_FEEDBACK || f.contains('\0') {
                        return Err(RequestError::Malformed(format!(
                            "run: feedback must be at most {} bytes without NUL ({} bytes)",
                            crate::protocol::MAX_FEEDBACK,
                            f.len()
                        )));
                    }
                }
                self.check_run_not_stopped()?;
                if running || self.pending_run.is_some() {
                    return Err(RequestError::Busy("an iteration is running".into()));
                }
                // An upload swaps its tree in when its stream ends: never under a running agent.
                if let Some(c) = self.conns.iter().find(|c| c.upload.in_progress()) {
                    return Err(RequestError::Busy(format!(
                        "an upload is in progress (connection {})",
                        c.id
                    )));
                }
                if self.manifest.is_none() {
                    return Err(RequestError::Order(
                        "run needs a manifest: send set_manifest first".into(),
                    ));
                }
                self.check_listings_complete()?;
                if self.shutdown.is_some() {
                    return Err(RequestError::Busy("the supervisor is shutting down".into()));
                }
                self.pending_run = Some(PendingRun {
                    conn: conn_id,
                    id,
                    feedback,
                });
            }
            Request::Signal { signal, .. } => {
                let signo = signal_number(signal);
                if running {
                    self.actions.push(ObserverAction::Signal(signo));
                }
                self.conns[i].send(&Response::ok(
                    id,
                    &detail::Signalled {
                        delivered: running,
                        signal: exit_code::signal_name(signo),
                    },
                ));
            }
            Request::Cancel { run, .. } => {
                if running {
                    self.actions
                        .push(ObserverAction::Cancel("requested by the host".into()));
                }
                let run_stopped = run && self.stop_claimed_run();
                self.conns[i].send(&Response::ok(
                    id,
                    &detail::Cancelled {
                        cancelled: running,
                        run_stopped,
                    },
                ));
            }
            Request::Collect { iteration, .. } => self.collect(i, id, iteration)?,
            Request::Claim {
                run,
                plan,
                lease_ms,
                tunnel,
                ..
            } => {
                let claim = self.claim(conn_id, run, plan, lease_ms)?;
                self.conns[i].tunnel = tunnel;
                let held_listings = Some(self.held.digests());
                self.conns[i].send(&Response::ok(
                    id,
                    &detail::Claimed {
                        claim,
                        held_listings,
                    },
                ));
            }
            // Routed by `on_control` before they get here.
            Request::TunnelOpened { .. }
            | Request::TunnelRefused { .. }
            | Request::TunnelClose { .. }
            | Request::TunnelAck { .. }
            | Request::TunnelInjected { .. } => {}
            Request::Renew { .. } => {
                let lease_ms = self.renew(conn_id)?;
                self.conns[i].send(&Response::ok(id, &detail::Renewed { lease_ms }));
            }
            Request::Release { .. } => {
                self.release(conn_id)?;
                self.conns[i].send(&Response::ok(id, &()));
            }
            Request::Collected { iterations, .. } => {
                self.mark_collected(&iterations);
                self.prune_collected();
                self.conns[i].send(&Response::ok(
                    id,
                    &detail::CollectedAck {
                        collected: iterations.len() as u64,
                    },
                ));
            }
            Request::Status { verify, .. } => {
                if verify && running {
                    return Err(RequestError::Busy(
                        "live verification is refused while an iteration runs".into(),
                    ));
                }
                let status = Box::new(self.status(ctx, verify));
                self.conns[i].send(&Response::Status { id, status });
            }
            Request::Shutdown { .. } => {
                if running {
                    self.actions
                        .push(ObserverAction::Cancel("supervisor shutdown".into()));
                }
                self.shutdown = Some(PendingShutdown { conn: conn_id, id });
            }
        }
        Ok(())
    }

    /// A tunnel message from connection `from`: taken only from the connection that carries
    /// the run's connections, and only while an iteration has them.
    fn tunnel_says(&mut self, from: u64, msg: HostSays) {
        if self.tunnel_conn() != Some(from) {
            tracing::debug!("conn {from}: a tunnel message from a connection that carries none");
            return;
        }
        if let Some(egress) = self.egress.as_mut() {
            egress.host_says(msg);
        }
    }

    /// Sends the record of `iteration` (default: the last one) as a tar stream on the tar
    /// channel, then `ok`.
    fn collect(&mut self, i: usize, id: u64, iteration: Option<u32>) -> Result<(), RequestError> {
        let n = iteration.unwrap_or(self.last_iteration);
        if self.current.as_ref().is_some_and(|cur| cur.iteration == n) {
            return Err(RequestError::Busy(format!(
                "iteration {n} is still running"
            )));
        }
        let dir = records::iteration_dir(&self.records, n);
        if n > 0 {
            records::restore_modes(&self.records, &dir);
        }
        self.unwritten.flush();
        let in_memory = self.unwritten.get(n).map(str::to_owned);
        if n == 0 || (in_memory.is_none() && !dir.join("result.json").is_file()) {
            let why = if n > 0 && n <= self.last_iteration && !dir.exists() {
                match &self.manifest {
                    Some(m) => format!(
                        " (deleted after the host collected it: the sandbox keeps the newest {}                          collected records, at most {} bytes; the harness's retention)",
                        m.retention.records, m.retention.bytes
                    ),
                    None => " (deleted after the host collected it)".to_string(),
                }
            } else {
                String::new()
            };
            return Err(RequestError::NotFound(format!(
                "no record of iteration {n}{why}"
            )));
        }
        let c = &mut self.conns[i];
        let mut out = TarFrames::new(c);
        let tarred = match &in_memory {
            // The disk had no room for it: the record alone, from memory.
            Some(line) => records::tar_record_line(line.as_bytes(), &mut out),
            None => records::tar_dir(&dir, &mut out),
        };
        let sent = tarred.and_then(|()| out.end());
        match sent {
            Ok(bytes) => c.send(&Response::ok(
                id,
                &detail::CollectSent {
                    bytes,
                    iteration: n,
                },
            )),
            Err(err) => {
                // The stream may be cut mid-tar: the host can no longer trust the framing.
                tracing::warn!("collect: iteration {n}: {err}");
                c.dead = true;
            }
        }
        Ok(())
    }
}
