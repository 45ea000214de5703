//! The agent's way out under `network: allow`: listeners inside the sandbox's network
//! namespace, opened before the agent launches and closed when the iteration ends, whose
//! connections the host carries over the control stream (`tunnel_*` messages, channel 5,
//! [`crate::protocol::tunnel`]).
//!
//! - a **mirror** for each allowed loopback endpoint (`127.0.0.1:P`, `[::1]:P`, `localhost:P`):
//!   a listener on that same address, so a base URL the runtime was given works inside; the
//!   host dials the same address on its side;
//! - a **model listener** on `127.0.0.1:<ephemeral>` when the manifest has a `model` route
//!   with a base-URL variable (pinned to it, [`Egress::pins`]): plain HTTP, carried to the
//!   route's upstream as a *model connection*, to which the host adds the credentials; a mirror
//!   of the upstream itself carries model connections too;
//! - one HTTP **`CONNECT` proxy** on `127.0.0.1:<ephemeral>` for named endpoints: the request
//!   head is read (at most [`MAX_HEAD`] bytes, within [`HEAD_TIMEOUT`]), only `CONNECT
//!   host:port` is taken, the policy decides, the host dials, and the answer is `200`, or `403`
//!   / `502` with a one-line reason.
//!
//! Under `network: {allow: […], from: sandbox}` the supervisor dials the connections itself
//! (but model connections, which the host's credentials need), from the sandbox's network
//! namespace ([`Dials`]: resolution and connect on a short-lived thread each, by the host's own
//! rules, [`crate::egress::address`]), and relays their bytes here; the agent then always runs
//! in a namespace of its own, where these listeners are.
//!
//! Everything is non-blocking and serviced from the supervisor's one poll loop. Each
//! connection holds at most a window ([`tunnel::WINDOW`]) of the host's bytes for the agent,
//! and sends the host at most a window the host has not acknowledged. Every attempt is
//! recorded ([`NetworkRecord`]).

use crate::egress::sni::{self, SniError, MAX_CLIENT_HELLO_BYTES};
use crate::manifest::{DialFrom, Endpoint, ModelRoute, NetworkPolicy};
use crate::protocol::{tunnel, Channel, Frame, Response};
use crate::result::{ConnectionRecord, ModelRouteRecord, NetworkRecord, MAX_RECORDED_CONNECTIONS};
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long the supervisor's own dial of one address may take (`from: sandbox`).
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// The most bytes of a `CONNECT` request head.
const MAX_HEAD: usize = 8 * 1024;

/// How long a client of the proxy has to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections accepted per listener per wake-up (the rest wait in the backlog).
const ACCEPTS_PER_WAKE: usize = 64;

/// How a connection reached pitcrew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Mirror,
    Proxy,
    Model,
}

impl Via {
    fn name(self) -> &'static str {
        match self {
            Via::Mirror => "mirror",
            Via::Proxy => "proxy",
            Via::Model => "model",
        }
    }
}

/// Where one connection is.
#[derive(Debug, PartialEq, Eq)]
enum State {
    /// The proxy reads the request head.
    Head { since: Instant },
    /// The host was asked to dial.
    Opening,
    /// Bytes flow.
    Open,
}

/// One connection of the agent's.
#[derive(Debug)]
struct Carried {
    stream: TcpStream,
    via: Via,
    state: State,
    host: String,
    port: u16,
    started: Instant,
    /// Bytes read from the agent not yet sent (the head's rest, or what arrived while opening).
    up_pending: Vec<u8>,
    /// Bytes the host may still be sent before it acknowledges more.
    up_credit: u32,
    /// Bytes for the agent not yet written to its socket.
    down: Vec<u8>,
    /// Of `down`, the first bytes that are pitcrew's own (the proxy's answer), not the host's.
    down_own: usize,
    /// Host bytes written to the agent and not yet acknowledged.
    down_unacked: u32,
    agent_eof: bool,
    host_eof: bool,
    bytes_up: u64,
    bytes_down: u64,
    /// Close once `down` is written (a refusal's answer).
    closing: Option<String>,
    /// A proxied connection's first bytes are held until its TLS ClientHello's server name is
    /// read and matches the `CONNECT`'s host ([`Carried::check_hello`]).
    hello_pending: bool,
    /// A model connection: the host adds the credentials.
    model: bool,
    /// The credentials the host said it added (names).
    injected: Vec<String>,
    /// The supervisor dials it (`from: sandbox`): no host side, no tunnel frames.
    from_sandbox: bool,
    /// The supervisor's own connection to the endpoint, once dialled (`from: sandbox`).
    direct: Option<Direct>,
}

/// The endpoint's side of a connection the supervisor dialled itself.
#[derive(Debug)]
struct Direct {
    stream: TcpStream,
    /// The agent's bytes not yet written to the endpoint (at most a window).
    up: Vec<u8>,
    /// The agent finished writing: the endpoint's write side is shut once `up` is out.
    end_pending: bool,
}

/// The dials under way under `from: sandbox`, each on a short-lived thread of its own, and
/// where they report: a channel, and a socket pair whose readable end wakes the poll loop.
#[derive(Debug)]
struct Dials {
    tx: mpsc::Sender<(u32, Result<TcpStream, String>)>,
    rx: mpsc::Receiver<(u32, Result<TcpStream, String>)>,
    wake_tx: UnixStream,
    wake_rx: UnixStream,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Dials {
    fn new() -> io::Result<Dials> {
        let (tx, rx) = mpsc::channel();
        let (wake_tx, wake_rx) = UnixStream::pair()?;
        wake_rx.set_nonblocking(true)?;
        Ok(Dials {
            tx,
            rx,
            wake_tx,
            wake_rx,
            threads: Vec::new(),
        })
    }

    /// Dials `host`:`port` under `policy` on a thread of its own; `Err` when no thread could be
    /// started.
    fn start(
        &mut self,
        conn: u32,
        policy: &NetworkPolicy,
        host: &str,
        port: u16,
    ) -> Result<(), String> {
        // Finished threads are joined as new ones start: at most the open ones stay.
        let (done, running): (Vec<_>, Vec<_>) =
            self.threads.drain(..).partition(|t| t.is_finished());
        self.threads = running;
        for t in done {
            let _ = t.join();
        }
        let (policy, host) = (policy.clone(), host.to_string());
        let tx = self.tx.clone();
        let mut wake = self
            .wake_tx
            .try_clone()
            .map_err(|e| format!("a dial's wake-up socket: {e}"))?;
        let thread = std::thread::Builder::new()
            .name("egress-dial".into())
            .spawn(move || {
                let dialled = crate::egress::address::dial(&policy, &host, port, DIAL_TIMEOUT);
                // The iteration may have ended meanwhile: nobody listens then, and the
                // connection is dropped here.
                let _ = tx.send((conn, dialled));
                let _ = wake.write_all(&[1]);
            })
            .map_err(|e| format!("a thread to dial on: {e}"))?;
        self.threads.push(thread);
        Ok(())
    }

    /// The dials that finished.
    fn finished(&mut self) -> Vec<(u32, Result<TcpStream, String>)> {
        let mut buf = [0u8; 64];
        while matches!(self.wake_rx.read(&mut buf), Ok(n) if n > 0) {}
        self.rx.try_iter().collect()
    }
}

impl Drop for Dials {
    /// Waits for every dial under way (each ends within the resolver's timeout and
    /// [`DIAL_TIMEOUT`] per address): no thread outlives the iteration's egress, so the next
    /// launch's fork finds the supervisor single-threaded ([`crate::sandbox::launch`]).
    fn drop(&mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The listeners and connections of one iteration.
#[derive(Debug)]
pub(super) struct Egress {
    policy: NetworkPolicy,
    mirrors: Vec<(TcpListener, String, u16)>,
    proxy: TcpListener,
    /// The model route and its listener (when it pins a base-URL variable).
    model: Option<(ModelRoute, Option<TcpListener>)>,
    conns: BTreeMap<u32, Carried>,
    next_id: u32,
    attempts: u32,
    record: NetworkRecord,
    /// Frames for the host.
    outbox: Vec<Frame>,
    /// The supervisor's own dials, under `from: sandbox`.
    dials: Option<Dials>,
}

/// The loopback addresses an allowed endpoint's host stands for: itself for a loopback literal,
/// both for `localhost`; none for anything else.
fn mirror_addresses(endpoint: &Endpoint) -> Vec<IpAddr> {
    if endpoint.host == "localhost" {
        return vec![Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into()];
    }
    match endpoint.ip() {
        Some(ip) if ip.is_loopback() => vec![ip],
        _ => Vec::new(),
    }
}

impl Egress {
    /// Opens the listeners for `policy` (an `allow`): a mirror per loopback endpoint and the
    /// proxy; connection ids start at `first_id` (an earlier iteration's [`Egress::next_id`]:
    /// the host's messages about an earlier iteration's connections name none of these);
    /// `model`, the manifest's model route. `Err` names what could not be bound.
    pub(super) fn open(
        policy: &NetworkPolicy,
        model: Option<&ModelRoute>,
        first_id: u32,
    ) -> Result<Egress, String> {
        let mut mirrors = Vec::new();
        let mut bound: Vec<SocketAddr> = Vec::new();
        for endpoint in policy.allowed() {
            let addrs = mirror_addresses(endpoint);
            for ip in &addrs {
                let at = SocketAddr::new(*ip, endpoint.port);
                // `localhost:P` and `127.0.0.1:P` both listed: one listener.
                if bound.contains(&at) {
                    continue;
                }
                bound.push(at);
                match TcpListener::bind(at) {
                    Ok(l) => mirrors.push((l, endpoint.host.clone(), endpoint.port)),
                    // `localhost` stands for both; a namespace without IPv6 keeps the other.
                    Err(_) if ip.is_ipv6() && addrs.len() > 1 => continue,
                    Err(err) => {
                        return Err(format!(
                            "network: cannot listen on {at} for the allowed {endpoint}: {err}"
                        ))
                    }
                }
            }
        }
        // The model listener first: a port the host wrote into pi's pinned models.json is
        // taken before the proxy's is picked.
        let model = match model {
            Some(route) if route.base_url_var().is_some() || route.pi_provider.is_some() => {
                let port = route.rewritten_models_json.as_ref().map_or(0, |r| r.port);
                let l = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).map_err(|err| {
                    format!("network: cannot open the model listener on 127.0.0.1:{port}: {err}")
                })?;
                Some((route.clone(), Some(l)))
            }
            Some(route) => Some((route.clone(), None)),
            None => None,
        };
        let proxy = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|err| format!("network: cannot open the proxy on 127.0.0.1: {err}"))?;
        let model_listener = model.as_ref().and_then(|(_, l)| l.as_ref());
        let model_record = model.as_ref().map(|(r, l)| ModelRouteRecord {
            upstream: r.upstream.to_string(),
            base_url_env: r.base_url_env.clone(),
            pi_provider: r.pi_provider.clone(),
            rewritten_models_json: r.rewritten_models_json.clone(),
            listener: l.as_ref().and_then(listener_url),
            credentials: r.credentials.clone(),
        });
        for l in mirrors
            .iter()
            .map(|(l, ..)| l)
            .chain([&proxy])
            .chain(model_listener)
        {
            l.set_nonblocking(true)
                .map_err(|err| format!("network: listener: {err}"))?;
        }
        let dials = match policy.dial_from() {
            DialFrom::Sandbox => Some(
                Dials::new().map_err(|err| format!("network: the dials' wake-up socket: {err}"))?,
            ),
            DialFrom::Host => None,
        };
        Ok(Egress {
            dials,
            policy: policy.clone(),
            mirrors,
            proxy,
            model,
            conns: BTreeMap::new(),
            next_id: first_id.max(1),
            attempts: 0,
            record: NetworkRecord {
                mode: policy.mode_name().to_string(),
                allow: policy.allowed().iter().map(ToString::to_string).collect(),
                from: (!policy.dial_from().is_host()).then(|| policy.dial_from().name().into()),
                model: model_record,
                ..NetworkRecord::default()
            },
            outbox: Vec::new(),
        })
    }

    /// The id the next connection would get: where a later iteration's ids start.
    pub(super) fn next_id(&self) -> u32 {
        self.next_id
    }

    /// The proxy's port on 127.0.0.1.
    pub(super) fn proxy_port(&self) -> u16 {
        self.proxy.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    /// The model listener's URL (`http://127.0.0.1:<port>`), when the route has one.
    pub(super) fn model_listener_url(&self) -> Option<String> {
        self.model
            .as_ref()
            .and_then(|(_, l)| l.as_ref())
            .and_then(listener_url)
    }

    /// The variables that point the agent at the listeners: the proxy's
    /// ([`crate::environment::network_pins`]), the model route's base-URL variable at the model
    /// listener, and each model credential at its placeholder.
    pub(super) fn pins(&self) -> Vec<crate::environment::IterationPin> {
        let mut pins = crate::environment::network_pins(self.proxy_port());
        if let Some((route, listener)) = &self.model {
            if let (Some(var), Some(url)) = (
                route.base_url_var(),
                listener.as_ref().and_then(listener_url),
            ) {
                pins.push((var.to_string(), url));
            }
            for name in &route.credentials {
                pins.push((name.clone(), crate::manifest::model::placeholder(name)));
            }
        }
        pins
    }

    /// Descriptors to poll for reading: the listeners, and connections that may read.
    pub(super) fn read_fds(&self) -> Vec<BorrowedFd<'_>> {
        let mut fds: Vec<BorrowedFd<'_>> = self.mirrors.iter().map(|(l, ..)| l.as_fd()).collect();
        fds.push(self.proxy.as_fd());
        if let Some((_, Some(l))) = &self.model {
            fds.push(l.as_fd());
        }
        if let Some(d) = &self.dials {
            fds.push(d.wake_rx.as_fd());
        }
        fds.extend(
            self.conns
                .values()
                .filter(|c| c.wants_read())
                .map(|c| c.stream.as_fd()),
        );
        fds.extend(self.conns.values().filter_map(Carried::direct_read_fd));
        fds
    }

    /// Descriptors to poll for writing: connections with bytes for the agent.
    pub(super) fn write_fds(&self) -> Vec<BorrowedFd<'_>> {
        let agents = self
            .conns
            .values()
            .filter(|c| !c.down.is_empty())
            .map(|c| c.stream.as_fd());
        let endpoints = self
            .conns
            .values()
            .filter_map(|c| c.direct.as_ref())
            .filter(|d| !d.up.is_empty())
            .map(|d| d.stream.as_fd());
        agents.chain(endpoints).collect()
    }

    /// Frames for the host, taken.
    pub(super) fn take_outbox(&mut self) -> Vec<Frame> {
        std::mem::take(&mut self.outbox)
    }

    /// Accepts new connections and moves bytes on every one; `host` says whether a host that
    /// carries connections holds the run.
    pub(super) fn service(&mut self, host: bool) {
        let dialled = self.dials.as_mut().map(Dials::finished).unwrap_or_default();
        for (conn, result) in dialled {
            match result {
                Ok(stream) => self.dialled(conn, stream),
                Err(reason) => self.apply(HostSays::Refused { conn, reason }),
            }
        }
        let mut listeners: Vec<(usize, Via, String, u16)> = (0..self.mirrors.len())
            .map(|i| (i, Via::Mirror, self.mirrors[i].1.clone(), self.mirrors[i].2))
            .chain([(usize::MAX, Via::Proxy, String::new(), 0)])
            .collect();
        if let Some((route, Some(_))) = &self.model {
            let up = &route.upstream;
            listeners.push((usize::MAX, Via::Model, up.host.clone(), up.port));
        }
        for (i, via, host_name, port) in listeners {
            for _ in 0..ACCEPTS_PER_WAKE {
                let listener = match (via, &self.model) {
                    (Via::Proxy, _) => &self.proxy,
                    (Via::Model, Some((_, Some(l)))) => l,
                    _ => &self.mirrors[i].0,
                };
                match listener.accept() {
                    Ok((stream, _)) => self.accepted(stream, via, &host_name, port, host),
                    Err(_) => break,
                }
            }
        }
        let ids: Vec<u32> = self.conns.keys().copied().collect();
        for id in ids {
            self.pump(id, host);
        }
    }

    /// A connection accepted on a listener.
    fn accepted(&mut self, stream: TcpStream, via: Via, name: &str, port: u16, host: bool) {
        self.attempts = self.attempts.saturating_add(1);
        let _ = stream.set_nonblocking(true);
        let _ = stream.set_nodelay(true);
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        let mut carried = Carried {
            stream,
            via,
            state: State::Head {
                since: Instant::now(),
            },
            host: name.to_string(),
            port,
            started: Instant::now(),
            up_pending: Vec::new(),
            up_credit: tunnel::WINDOW,
            down: Vec::new(),
            down_own: 0,
            down_unacked: 0,
            agent_eof: false,
            host_eof: false,
            bytes_up: 0,
            bytes_down: 0,
            closing: None,
            hello_pending: false,
            model: via == Via::Model || self.is_upstream(via, name, port),
            injected: Vec::new(),
            from_sandbox: false,
            direct: None,
        };
        if let Some(why) = self.bound(host, via != Via::Proxy && self.needs_host(&carried)) {
            carried.refuse_now(&why, 503);
            self.finish(carried, false, Some(why));
            return;
        }
        if via != Via::Proxy {
            carried.state = State::Opening;
            if let Err(why) = self.open_upstream(id, &mut carried) {
                carried.refuse_now(&why, 503);
                self.finish(carried, false, Some(why));
                return;
            }
        }
        self.conns.insert(id, carried);
    }

    /// Whether connection `c` needs the host: it carries it, unless the supervisor dials
    /// (`from: sandbox`, and not a model connection, whose credentials are the host's).
    fn needs_host(&self, c: &Carried) -> bool {
        self.dials.is_none() || c.model
    }

    /// Opens the endpoint's side of `c`: the supervisor dials (`from: sandbox`, not a model
    /// connection) or asks the host to. `Err` when the dial could not be started.
    fn open_upstream(&mut self, id: u32, c: &mut Carried) -> Result<(), String> {
        match &mut self.dials {
            Some(dials) if !c.model => {
                c.from_sandbox = true;
                dials.start(id, &self.policy, &c.host, c.port)
            }
            _ => {
                self.ask_host(id, c);
                Ok(())
            }
        }
    }

    /// The supervisor's dial of connection `conn` connected: it is open, as when the host says
    /// `tunnel_opened`.
    fn dialled(&mut self, conn: u32, stream: TcpStream) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let _ = stream.set_nonblocking(true);
        let _ = stream.set_nodelay(true);
        c.direct = Some(Direct {
            stream,
            up: Vec::new(),
            end_pending: false,
        });
        self.apply(HostSays::Opened { conn });
    }

    /// Whether a mirror's connection goes to the model route's upstream.
    fn is_upstream(&self, via: Via, name: &str, port: u16) -> bool {
        via == Via::Mirror
            && self
                .model
                .as_ref()
                .is_some_and(|(r, _)| r.upstream.host == name && r.upstream.port == port)
    }

    /// Why a new connection cannot be carried now, if it cannot; `needs_host`: the host would
    /// carry it.
    fn bound(&self, host: bool, needs_host: bool) -> Option<String> {
        if needs_host && !host {
            return Some(
                "no host carries connections for this run (pitcrew-init run, or the host \
                 went away)"
                    .into(),
            );
        }
        if self.attempts > tunnel::MAX_ATTEMPTS {
            return Some(format!(
                "more than {} connection attempts in this iteration",
                tunnel::MAX_ATTEMPTS
            ));
        }
        if self.conns.len() >= tunnel::MAX_OPEN {
            return Some(format!(
                "{} connections are open already, the most at once",
                tunnel::MAX_OPEN
            ));
        }
        None
    }

    fn ask_host(&mut self, id: u32, c: &Carried) {
        self.outbox.push(Frame::control(&Response::TunnelOpen {
            conn: id,
            host: c.host.clone(),
            port: c.port,
            model: c.model,
        }));
    }

    /// Moves what can move on connection `id`.
    fn pump(&mut self, id: u32, host: bool) {
        let Some(mut c) = self.conns.remove(&id) else {
            return;
        };
        if let State::Head { since } = c.state {
            match c.read_head() {
                Ok(None) if since.elapsed() < HEAD_TIMEOUT => {}
                Ok(None) => {
                    let why = "no CONNECT request head in time".to_string();
                    c.refuse_now(&why, 408);
                    return self.finish(c, false, Some(why));
                }
                Ok(Some((name, port))) => {
                    c.host = name;
                    c.port = port;
                    if !self.policy.allows(&c.host, c.port) {
                        let why = format!("{}:{} is not allowed", c.host, c.port);
                        c.refuse_now(&why, 403);
                        return self.finish(c, false, Some(why));
                    }
                    if let Some(why) = self.bound(host, self.needs_host(&c)) {
                        c.refuse_now(&why, 503);
                        return self.finish(c, false, Some(why));
                    }
                    c.state = State::Opening;
                    if let Err(why) = self.open_upstream(id, &mut c) {
                        c.refuse_now(&why, 503);
                        return self.finish(c, false, Some(why));
                    }
                }
                Err(why) => {
                    c.refuse_now(&why, 400);
                    return self.finish(c, false, Some(why));
                }
            }
        }
        if c.state == State::Open && c.hello_pending {
            match c.check_hello() {
                Hello::Wait => {}
                Hello::Pass => {
                    c.hello_pending = false;
                    let held = std::mem::take(&mut c.up_pending);
                    c.send_up(&mut self.outbox, id, held);
                    if c.agent_eof {
                        c.end_up(&mut self.outbox, id);
                    }
                }
                Hello::Refuse(why) => {
                    c.tell_host_closed(&mut self.outbox, id, &why);
                    return self.finish(c, false, Some(why));
                }
            }
        }
        if c.state == State::Open && !c.hello_pending {
            c.read_up(&mut self.outbox, id);
        }
        c.pump_direct();
        let wrote = c.write_down();
        if wrote > 0 && c.state == State::Open && !c.from_sandbox {
            c.down_unacked = c.down_unacked.saturating_add(wrote);
            if c.down_unacked >= tunnel::WINDOW / 4 || c.down.is_empty() {
                self.outbox.push(Frame::control(&Response::TunnelAck {
                    conn: id,
                    bytes: c.down_unacked,
                }));
                c.down_unacked = 0;
            }
        }
        if c.down.is_empty() {
            if let Some(why) = c.closing.take() {
                let allowed = c.state == State::Open;
                return self.finish(c, allowed, Some(why));
            }
            if c.host_eof {
                let _ = c.stream.shutdown(Shutdown::Write);
            }
        }
        let up_out = c.direct.as_ref().is_none_or(|d| d.up.is_empty());
        if c.agent_eof && c.host_eof && c.down.is_empty() && up_out {
            c.tell_host_closed(&mut self.outbox, id, "closed");
            return self.finish(c, true, None);
        }
        if c.closing.is_none() && c.state == State::Open && c.failed() {
            let why = "the agent's side failed";
            c.tell_host_closed(&mut self.outbox, id, why);
            return self.finish(c, true, Some(why.into()));
        }
        self.conns.insert(id, c);
    }

    /// A message from the host about connection `conn`; one about a connection the supervisor
    /// dialled itself (`from: sandbox`) is none of the host's and is ignored.
    pub(super) fn host_says(&mut self, msg: HostSays) {
        if self.conns.get(&msg.conn()).is_some_and(|c| c.from_sandbox) {
            return;
        }
        self.apply(msg);
    }

    /// What the host (or, for the supervisor's own dials, the dial) said about a connection.
    fn apply(&mut self, msg: HostSays) {
        let conn = msg.conn();
        let Some(mut c) = self.conns.remove(&conn) else {
            return;
        };
        match msg {
            HostSays::Opened { .. } if c.state == State::Opening => {
                c.state = State::Open;
                if c.via == Via::Proxy {
                    let answer = b"HTTP/1.1 200 Connection established\r\n\r\n";
                    c.down.splice(0..0, answer.iter().copied());
                    c.down_own += answer.len();
                    // What the agent sent early stays held with its ClientHello.
                    c.hello_pending = true;
                } else {
                    let early = std::mem::take(&mut c.up_pending);
                    c.send_up(&mut self.outbox, conn, early);
                }
            }
            HostSays::Opened { .. } => {}
            HostSays::Refused { reason, .. } => {
                let code = if c.via == Via::Proxy { 502 } else { 0 };
                c.refuse_now(&reason, code);
                return self.finish(c, false, Some(reason));
            }
            HostSays::Close { reason, .. } => {
                // Said back, so the host lets go of the connection too.
                self.outbox.push(Frame::control(&Response::TunnelClose {
                    conn,
                    reason: "closed".into(),
                }));
                let allowed = c.state == State::Open;
                let reason = (reason != "closed").then_some(reason);
                let _ = c.stream.shutdown(Shutdown::Both);
                return self.finish(c, allowed, reason);
            }
            HostSays::Ack { bytes, .. } => {
                c.up_credit = c.up_credit.saturating_add(bytes).min(tunnel::WINDOW);
            }
            HostSays::Injected { names, .. } => {
                // Only the route's names, each once: the record never holds anything else.
                let known = self.model.as_ref().map(|(r, _)| &r.credentials);
                for name in names {
                    let ours = known.is_some_and(|k| k.contains(&name));
                    if c.model && ours && !c.injected.contains(&name) {
                        c.injected.push(name);
                    }
                }
            }
            HostSays::Data { bytes, .. } => {
                if bytes.is_empty() {
                    c.host_eof = true;
                } else if c.down.len() + bytes.len() > tunnel::WINDOW as usize + c.down_own {
                    let why = "the host sent past the window".to_string();
                    self.outbox.push(Frame::control(&Response::TunnelClose {
                        conn,
                        reason: why.clone(),
                    }));
                    return self.finish(c, true, Some(why));
                } else {
                    c.bytes_down += bytes.len() as u64;
                    c.down.extend_from_slice(&bytes);
                }
            }
        }
        self.conns.insert(conn, c);
    }

    /// The host that carried the connections is gone: every connection ends.
    pub(super) fn host_gone(&mut self) {
        // The supervisor's own connections (`from: sandbox`) do not need the host.
        let ids: Vec<u32> = (self.conns.iter())
            .filter(|(_, c)| !c.from_sandbox)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if let Some(c) = self.conns.remove(&id) {
                let _ = c.stream.shutdown(Shutdown::Both);
                let allowed = c.state == State::Open;
                self.finish(c, allowed, Some("the host went away".into()));
            }
        }
    }

    /// Ends the iteration's network: every connection closed (the host told), listeners
    /// dropped; the record.
    pub(super) fn close(mut self) -> (NetworkRecord, Vec<Frame>) {
        drop(self.dials.take());
        let ids: Vec<u32> = self.conns.keys().copied().collect();
        for id in ids {
            if let Some(c) = self.conns.remove(&id) {
                if !matches!(c.state, State::Head { .. }) {
                    let why = "the iteration ended";
                    c.tell_host_closed(&mut self.outbox, id, why);
                }
                let _ = c.stream.shutdown(Shutdown::Both);
                let allowed = c.state == State::Open;
                self.finish(c, allowed, Some("the iteration ended".into()));
            }
        }
        (self.record, self.outbox)
    }

    /// The connections open now, bytes so far (`status`).
    pub(super) fn live(&self) -> Vec<ConnectionRecord> {
        self.conns
            .values()
            .filter(|c| c.state == State::Open)
            .map(|c| ConnectionRecord {
                host: c.host.clone(),
                port: c.port,
                via: c.via.name().to_string(),
                allowed: true,
                reason: None,
                bytes_up: c.bytes_up,
                bytes_down: c.bytes_down,
                duration_ms: crate::clock::millis(c.started.elapsed()),
                injected: c.injected.clone(),
                from: c.from_sandbox.then(|| DialFrom::Sandbox.name().into()),
            })
            .collect()
    }

    /// Records a connection that ended; the host is told unless it ended it or never had it.
    /// A connection that was carried or moved bytes is always listed (there are at most
    /// [`tunnel::MAX_ATTEMPTS`]); a refused one only while the list is shorter than
    /// [`MAX_RECORDED_CONNECTIONS`], so refusals cannot push what left out of the record.
    fn finish(&mut self, c: Carried, allowed: bool, reason: Option<String>) {
        let _ = c.stream.shutdown(Shutdown::Both);
        if let Some(d) = &c.direct {
            let _ = d.stream.shutdown(Shutdown::Both);
        }
        let carried = allowed || c.bytes_up > 0 || c.bytes_down > 0;
        if !carried && self.record.connections.len() >= MAX_RECORDED_CONNECTIONS {
            self.record.dropped += 1;
            return;
        }
        self.record.connections.push(ConnectionRecord {
            host: c.host,
            port: c.port,
            via: c.via.name().to_string(),
            allowed,
            reason,
            bytes_up: c.bytes_up,
            bytes_down: c.bytes_down,
            duration_ms: crate::clock::millis(c.started.elapsed()),
            injected: c.injected,
            from: c.from_sandbox.then(|| DialFrom::Sandbox.name().into()),
        });
    }
}

impl Carried {
    /// Whether the agent's side should be polled for reading.
    fn wants_read(&self) -> bool {
        match self.state {
            State::Head { .. } => true,
            State::Opening => false,
            State::Open => !self.agent_eof && self.up_credit > 0 && self.closing.is_none(),
        }
    }

    /// The socket reports an error.
    fn failed(&self) -> bool {
        matches!(self.stream.take_error(), Ok(Some(_)))
    }

    /// Reads into the head; `Some((host, port))` once a whole `CONNECT` head is in.
    fn read_head(&mut self) -> Result<Option<(String, u16)>, String> {
        let mut buf = [0u8; 2048];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => {
                    // A half close after a whole head is the client's to make.
                    self.agent_eof = true;
                    break;
                }
                Ok(n) => self.up_pending.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("reading the request head: {e}")),
            }
            if self.up_pending.len() > MAX_HEAD {
                break;
            }
        }
        let Some(end) = self.up_pending.windows(4).position(|w| w == b"\r\n\r\n") else {
            if self.agent_eof {
                return Err("the client closed before its request head ended".into());
            }
            if self.up_pending.len() > MAX_HEAD {
                return Err(format!("a request head over {MAX_HEAD} bytes"));
            }
            return Ok(None);
        };
        let head = String::from_utf8_lossy(&self.up_pending[..end]).into_owned();
        self.up_pending.drain(..end + 4);
        parse_connect(&head).map(Some)
    }

    /// Reads the first bytes of a proxied connection into `up_pending` and judges its TLS
    /// ClientHello: the server name must be the `CONNECT`'s host (an address literal may come
    /// without one); bytes that are not TLS name no other server and pass.
    fn check_hello(&mut self) -> Hello {
        let mut buf = [0u8; 4096];
        while self.up_pending.len() < MAX_CLIENT_HELLO_BYTES && !self.agent_eof {
            let room = buf
                .len()
                .min(MAX_CLIENT_HELLO_BYTES - self.up_pending.len());
            match self.stream.read(&mut buf[..room]) {
                Ok(0) => self.agent_eof = true,
                Ok(n) => self.up_pending.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Hello::Refuse(format!("reading the ClientHello: {e}")),
            }
        }
        if self.up_pending.is_empty() {
            return if self.agent_eof {
                Hello::Pass
            } else {
                Hello::Wait
            };
        }
        match sni::server_name(&self.up_pending) {
            Err(SniError::Incomplete) if self.agent_eof => {
                Hello::Refuse("the client ended inside its TLS ClientHello".into())
            }
            Err(SniError::Incomplete) => Hello::Wait,
            Err(SniError::NotTls(_)) => Hello::Pass,
            Err(err) => Hello::Refuse(format!("TLS ClientHello: {err}")),
            Ok(None) if self.host.parse::<IpAddr>().is_ok() => Hello::Pass,
            Ok(None) => Hello::Refuse(format!(
                "a TLS ClientHello without a server name, for the name {}",
                self.host
            )),
            Ok(Some(name)) if sni::names_match(&name, &self.host) => Hello::Pass,
            Ok(Some(name)) => Hello::Refuse(format!(
                "the TLS server name {name:?} is not the CONNECT's host {}",
                self.host
            )),
        }
    }

    /// Reads what the agent sent, within the credit, and sends it to the host.
    fn read_up(&mut self, outbox: &mut Vec<Frame>, id: u32) {
        while self.up_credit > 0 && !self.agent_eof {
            let room = (self.up_credit as usize).min(tunnel::CHUNK);
            let mut buf = vec![0u8; room];
            match self.stream.read(&mut buf) {
                Ok(0) => {
                    self.agent_eof = true;
                    self.end_up(outbox, id);
                }
                Ok(n) => {
                    buf.truncate(n);
                    self.send_up(outbox, id, buf);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.agent_eof = true;
                    self.end_up(outbox, id);
                }
            }
        }
    }

    /// The agent finished writing: the host is told, or the endpoint's write side is shut once
    /// what it is owed is written.
    fn end_up(&mut self, outbox: &mut Vec<Frame>, id: u32) {
        match &mut self.direct {
            Some(d) => d.end_pending = true,
            None => outbox.push(Frame::data(Channel::Tunnel, tunnel::encode(id, &[]))),
        }
    }

    /// Tells the host that the connection ended, for `why` (not when the supervisor dialled
    /// it: the host never had it).
    fn tell_host_closed(&self, outbox: &mut Vec<Frame>, id: u32, why: &str) {
        if !self.from_sandbox {
            outbox.push(Frame::control(&Response::TunnelClose {
                conn: id,
                reason: why.to_string(),
            }));
        }
    }

    /// The endpoint's socket, when it should be polled for reading (`from: sandbox`).
    fn direct_read_fd(&self) -> Option<BorrowedFd<'_>> {
        let d = self.direct.as_ref()?;
        let room = self.down.len() < tunnel::WINDOW as usize + self.down_own;
        (self.state == State::Open && !self.host_eof && room).then(|| d.stream.as_fd())
    }

    /// Moves bytes between the agent's buffers and the endpoint the supervisor dialled: the
    /// agent's written out (each written byte frees credit, as the host's acknowledgement
    /// would), the endpoint's read in while the agent's side holds less than a window.
    fn pump_direct(&mut self) {
        let Some(d) = self.direct.as_mut() else {
            return;
        };
        while !d.up.is_empty() {
            match d.stream.write(&d.up) {
                Ok(0) => break,
                Ok(n) => {
                    d.up.drain(..n);
                    let n = u32::try_from(n).unwrap_or(u32::MAX);
                    self.up_credit = self.up_credit.saturating_add(n).min(tunnel::WINDOW);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    // The endpoint is gone: nothing more goes either way.
                    d.up.clear();
                    self.agent_eof = true;
                    self.host_eof = true;
                    break;
                }
            }
        }
        if d.end_pending && d.up.is_empty() {
            let _ = d.stream.shutdown(Shutdown::Write);
            d.end_pending = false;
        }
        let limit = tunnel::WINDOW as usize + self.down_own;
        let mut buf = vec![0u8; tunnel::CHUNK];
        while !self.host_eof && self.down.len() < limit {
            let room = (limit - self.down.len()).min(buf.len());
            match d.stream.read(&mut buf[..room]) {
                Ok(0) => self.host_eof = true,
                Ok(n) => {
                    self.down.extend_from_slice(&buf[..n]);
                    self.bytes_down += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => self.host_eof = true,
            }
        }
    }

    /// Sends `bytes` of the agent's to the host, or to the endpoint the supervisor dialled
    /// (within the credit: the caller read no more).
    fn send_up(&mut self, outbox: &mut Vec<Frame>, id: u32, bytes: Vec<u8>) {
        if let Some(d) = &mut self.direct {
            let n = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
            self.up_credit = self.up_credit.saturating_sub(n);
            self.bytes_up += bytes.len() as u64;
            d.up.extend_from_slice(&bytes);
            return;
        }
        for chunk in bytes.chunks(tunnel::CHUNK) {
            outbox.push(Frame::data(Channel::Tunnel, tunnel::encode(id, chunk)));
            let n = u32::try_from(chunk.len()).unwrap_or(u32::MAX);
            self.up_credit = self.up_credit.saturating_sub(n);
            self.bytes_up += chunk.len() as u64;
        }
    }

    /// Writes what it can of `down`; returns the host's bytes written.
    fn write_down(&mut self) -> u32 {
        let mut host_bytes = 0usize;
        while !self.down.is_empty() {
            match self.stream.write(&self.down) {
                Ok(0) => break,
                Ok(n) => {
                    let own = n.min(self.down_own);
                    self.down_own -= own;
                    host_bytes += n - own;
                    self.down.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.down.clear();
                    self.down_own = 0;
                    self.agent_eof = true;
                    self.host_eof = true;
                    break;
                }
            }
        }
        u32::try_from(host_bytes).unwrap_or(u32::MAX)
    }

    /// Answers a refused proxy request with `code` and `why` (a mirror's connection is just
    /// closed: `code` 0), then closes once that is written.
    fn refuse_now(&mut self, why: &str, code: u16) {
        if self.via == Via::Proxy && code != 0 {
            let text = match code {
                400 => "Bad Request",
                403 => "Forbidden",
                408 => "Request Timeout",
                502 => "Bad Gateway",
                _ => "Service Unavailable",
            };
            let line = why.replace(['\r', '\n'], " ");
            let answer = format!(
                "HTTP/1.1 {code} {text}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\npitcrew: {line}\n",
                line.len() + 10
            );
            self.down = answer.into_bytes();
            self.down_own = self.down.len();
            // Best effort: a refusal is short, the socket's buffer takes it.
            self.write_down();
        }
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

/// What a proxied connection's first bytes decide.
enum Hello {
    /// More bytes are needed.
    Wait,
    /// Carry them.
    Pass,
    /// End the connection, for this reason.
    Refuse(String),
}

/// What the host said about a connection.
#[derive(Debug)]
pub(super) enum HostSays {
    /// `tunnel_opened`.
    Opened { conn: u32 },
    /// `tunnel_refused`.
    Refused { conn: u32, reason: String },
    /// `tunnel_close`.
    Close { conn: u32, reason: String },
    /// `tunnel_ack`.
    Ack { conn: u32, bytes: u32 },
    /// `tunnel_injected`.
    Injected { conn: u32, names: Vec<String> },
    /// A channel-5 data frame (empty: the host finished writing).
    Data { conn: u32, bytes: Vec<u8> },
}

impl HostSays {
    fn conn(&self) -> u32 {
        match self {
            HostSays::Opened { conn }
            | HostSays::Refused { conn, .. }
            | HostSays::Close { conn, .. }
            | HostSays::Ack { conn, .. }
            | HostSays::Injected { conn, .. }
            | HostSays::Data { conn, .. } => *conn,
        }
    }
}

/// The target of a `CONNECT host:port HTTP/1.x` request head; `Err` names what is wrong.
fn parse_connect(head: &str) -> Result<(String, u16), String> {
    let line = head.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("a request line that is not `CONNECT host:port HTTP/1.1`".into());
    };
    if method != "CONNECT" {
        return Err(format!(
            "method {method:?}: the proxy takes CONNECT only (HTTPS through it)"
        ));
    }
    if !version.starts_with("HTTP/1.") {
        return Err(format!("version {version:?}"));
    }
    let endpoint = Endpoint::parse(target).map_err(|e| format!("CONNECT target: {e}"))?;
    if endpoint.is_wildcard() {
        return Err("CONNECT target: a wildcard is no host".into());
    }
    Ok((endpoint.host, endpoint.port))
}

/// The URL of a model listener on 127.0.0.1.
fn listener_url(l: &TcpListener) -> Option<String> {
    let port = l.local_addr().ok()?.port();
    Some(format!("http://127.0.0.1:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_connect_to_a_host_and_port_is_taken() {
        assert_eq!(
            parse_connect("CONNECT Api.Example.com:443 HTTP/1.1\r\nHost: x"),
            Ok(("api.example.com".into(), 443))
        );
        assert_eq!(
            parse_connect("CONNECT [::1]:8080 HTTP/1.0"),
            Ok(("::1".into(), 8080))
        );
        for bad in [
            "GET http://x/ HTTP/1.1",
            "CONNECT x HTTP/1.1",
            "CONNECT x:1 HTTP/2",
            "CONNECT *.x.com:1 HTTP/1.1",
            "CONNECT x:1  HTTP/1.1",
        ] {
            assert!(parse_connect(bad).is_err(), "{bad}");
        }
    }

    /// The host's side, played by the test: the frames the egress sent, decoded.
    fn sent(egress: &mut Egress) -> Vec<Result<Response, (u32, Vec<u8>)>> {
        egress
            .take_outbox()
            .into_iter()
            .map(|f| match f.channel {
                Channel::Tunnel => {
                    let (conn, bytes) = tunnel::decode(&f.payload).unwrap();
                    Err((conn, bytes.to_vec()))
                }
                _ => Ok(f.json::<Response>().unwrap()),
            })
            .collect()
    }

    /// Services `egress` until it sent something or `tries` ran out.
    fn service_until_sent(egress: &mut Egress) -> Vec<Result<Response, (u32, Vec<u8>)>> {
        for _ in 0..200 {
            egress.service(true);
            let got = sent(egress);
            if !got.is_empty() {
                return got;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Vec::new()
    }

    #[test]
    fn the_model_listener_is_pinned_carried_as_a_model_connection_and_names_what_was_injected() {
        let policy = NetworkPolicy::allow(vec![Endpoint::parse("api.anthropic.com:443").unwrap()]);
        let route = ModelRoute {
            base_url_env: Some("ANTHROPIC_BASE_URL".into()),
            pi_provider: None,
            rewritten_models_json: None,
            upstream: Endpoint::parse("api.anthropic.com:443").unwrap(),
            credentials: vec!["ANTHROPIC_API_KEY".into()],
        };
        let mut egress = Egress::open(&policy, Some(&route), 1).unwrap();
        let pins = egress.pins();
        let pinned = |name: &str| pins.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        let url = pinned("ANTHROPIC_BASE_URL").unwrap();
        assert_eq!(
            pinned("ANTHROPIC_API_KEY").as_deref(),
            Some("pitcrew-placeholder-ANTHROPIC_API_KEY")
        );
        assert!(pinned("HTTPS_PROXY").is_some());
        let port: u16 = url
            .strip_prefix("http://127.0.0.1:")
            .unwrap()
            .parse()
            .unwrap();
        let _agent = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let got = service_until_sent(&mut egress);
        let Some(Ok(Response::TunnelOpen {
            conn,
            host,
            port,
            model,
        })) = got.first().cloned()
        else {
            panic!("{got:?}")
        };
        assert_eq!(
            (host.as_str(), port, model),
            ("api.anthropic.com", 443, true)
        );
        egress.host_says(HostSays::Opened { conn });
        // Names the route does not carry are not recorded; each name once.
        egress.host_says(HostSays::Injected {
            conn,
            names: vec!["ANTHROPIC_API_KEY".into(), "OTHER".into()],
        });
        egress.host_says(HostSays::Injected {
            conn,
            names: vec!["ANTHROPIC_API_KEY".into()],
        });
        let (record, _) = egress.close();
        let route = record.model.as_ref().unwrap();
        assert_eq!(route.upstream, "api.anthropic.com:443");
        assert_eq!(route.base_url_env.as_deref(), Some("ANTHROPIC_BASE_URL"));
        assert_eq!(route.credentials, ["ANTHROPIC_API_KEY"]);
        let c = &record.connections[0];
        assert_eq!((c.via.as_str(), c.allowed), ("model", true));
        assert_eq!(c.injected, ["ANTHROPIC_API_KEY"]);
        let json = serde_json::to_string(c).unwrap();
        assert!(
            json.contains(r#""injected":["ANTHROPIC_API_KEY"]"#),
            "{json}"
        );
    }

    #[test]
    fn a_proxied_connection_is_opened_relayed_within_the_window_and_recorded() {
        let policy = NetworkPolicy::allow(vec![Endpoint::parse("api.example.com:443").unwrap()]);
        let mut egress = Egress::open(&policy, None, 1).unwrap();
        let proxy = ("127.0.0.1", egress.proxy_port());
        let mut agent = TcpStream::connect(proxy).unwrap();
        agent
            .write_all(b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let got = service_until_sent(&mut egress);
        let Some(Ok(Response::TunnelOpen {
            conn, host, port, ..
        })) = got.first().cloned()
        else {
            panic!("{got:?}")
        };
        assert_eq!((host.as_str(), port), ("api.example.com", 443));
        egress.host_says(HostSays::Opened { conn });
        egress.service(true);
        let mut answer = [0u8; 39];
        agent.read_exact(&mut answer).unwrap();
        assert_eq!(&answer[..], b"HTTP/1.1 200 Connection established\r\n\r\n");
        // Not TLS: nothing names another server; the bytes go to the host.
        agent.write_all(b"plain bytes").unwrap();
        let got = service_until_sent(&mut egress);
        assert_eq!(got, [Err((conn, b"plain bytes".to_vec()))]);
        // The host's bytes reach the agent and are acknowledged once written.
        egress.host_says(HostSays::Data {
            conn,
            bytes: b"answer".to_vec(),
        });
        let got = service_until_sent(&mut egress);
        assert_eq!(got, [Ok(Response::TunnelAck { conn, bytes: 6 })]);
        let mut back = [0u8; 6];
        agent.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"answer");
        // A host that sends past the window is cut off.
        egress.host_says(HostSays::Data {
            conn,
            bytes: vec![0; tunnel::WINDOW as usize + 1],
        });
        let got = sent(&mut egress);
        assert!(
            matches!(&got[..], [Ok(Response::TunnelClose { reason, .. })] if reason.contains("window")),
            "{got:?}"
        );
        let (record, _) = egress.close();
        assert_eq!(record.connections.len(), 1);
        let c = &record.connections[0];
        assert_eq!((c.via.as_str(), c.bytes_up, c.bytes_down), ("proxy", 11, 6));
    }

    #[test]
    fn a_client_that_half_closes_after_its_head_is_carried_and_its_end_passed_on() {
        let policy = NetworkPolicy::allow(vec![Endpoint::parse("api.example.com:443").unwrap()]);
        let mut egress = Egress::open(&policy, None, 1).unwrap();
        let mut agent = TcpStream::connect(("127.0.0.1", egress.proxy_port())).unwrap();
        agent
            .write_all(b"CONNECT api.example.com:443 HTTP/1.1\r\n\r\n")
            .unwrap();
        agent.shutdown(Shutdown::Write).unwrap();
        let got = service_until_sent(&mut egress);
        let Some(Ok(Response::TunnelOpen { conn, .. })) = got.first().cloned() else {
            panic!("{got:?}")
        };
        egress.host_says(HostSays::Opened { conn });
        egress.service(true);
        // Nothing was held: the host hears the agent's end.
        assert_eq!(sent(&mut egress), [Err((conn, Vec::new()))]);
        let mut answer = [0u8; 39];
        agent.read_exact(&mut answer).unwrap();
        assert_eq!(&answer[..], b"HTTP/1.1 200 Connection established\r\n\r\n");
        // A head cut off by the client's end is still refused.
        let mut cut = TcpStream::connect(("127.0.0.1", egress.proxy_port())).unwrap();
        cut.write_all(b"CONNECT api.example.com:443 HTTP/1.1\r\n")
            .unwrap();
        cut.shutdown(Shutdown::Write).unwrap();
        let mut text = String::new();
        for _ in 0..200 {
            egress.service(true);
            cut.set_nonblocking(true).unwrap();
            let mut buf = [0u8; 512];
            if let Ok(n) = cut.read(&mut buf) {
                text.push_str(&String::from_utf8_lossy(&buf[..n]));
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(text.starts_with("HTTP/1.1 400 "), "{text}");
        assert!(
            text.contains("closed before its request head ended"),
            "{text}"
        );
    }

    #[test]
    fn the_agent_sends_no_more_than_the_window_before_the_host_acknowledges() {
        let policy = NetworkPolicy::allow(vec![Endpoint::parse("api.example.com:443").unwrap()]);
        let mut egress = Egress::open(&policy, None, 1).unwrap();
        let mut agent = TcpStream::connect(("127.0.0.1", egress.proxy_port())).unwrap();
        agent
            .write_all(b"CONNECT api.example.com:443 HTTP/1.1\r\n\r\n")
            .unwrap();
        let Some(Ok(Response::TunnelOpen { conn, .. })) =
            service_until_sent(&mut egress).first().cloned()
        else {
            panic!("no tunnel_open")
        };
        egress.host_says(HostSays::Opened { conn });
        // More than a window, not TLS.
        let big = vec![b'x'; tunnel::WINDOW as usize * 2];
        let writer = std::thread::spawn(move || {
            let _ = agent.write_all(&big);
            agent
        });
        let mut up = 0usize;
        let pump = |egress: &mut Egress, up: &mut usize| {
            egress.service(true);
            for frame in sent(egress) {
                if let Err((_, bytes)) = frame {
                    *up += bytes.len();
                }
            }
        };
        // Up to the window, however long the writer takes; then no further.
        for _ in 0..5000 {
            pump(&mut egress, &mut up);
            if up >= tunnel::WINDOW as usize {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        for _ in 0..50 {
            pump(&mut egress, &mut up);
        }
        assert_eq!(up, tunnel::WINDOW as usize);
        egress.host_says(HostSays::Ack {
            conn,
            bytes: tunnel::WINDOW,
        });
        for _ in 0..5000 {
            pump(&mut egress, &mut up);
            if up >= 2 * tunnel::WINDOW as usize {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(up, 2 * tunnel::WINDOW as usize);
        drop(writer.join());
    }

    #[test]
    fn without_a_host_and_past_the_policy_the_proxy_refuses_naming_why() {
        let policy = NetworkPolicy::allow(vec![Endpoint::parse("api.example.com:443").unwrap()]);
        let mut egress = Egress::open(&policy, None, 1).unwrap();
        for (target, host, code) in [
            ("evil.example.com:443", true, "403"),
            ("api.example.com:443", false, "503"),
        ] {
            let mut agent = TcpStream::connect(("127.0.0.1", egress.proxy_port())).unwrap();
            agent
                .write_all(format!("CONNECT {target} HTTP/1.1\r\n\r\n").as_bytes())
                .unwrap();
            let mut answer = String::new();
            for _ in 0..200 {
                egress.service(host);
                agent.set_nonblocking(true).unwrap();
                let mut buf = [0u8; 512];
                if let Ok(n) = agent.read(&mut buf) {
                    answer.push_str(&String::from_utf8_lossy(&buf[..n]));
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            assert!(answer.starts_with(&format!("HTTP/1.1 {code} ")), "{answer}");
        }
        let (record, _) = egress.close();
        let reasons: Vec<&str> = record
            .connections
            .iter()
            .map(|c| c.reason.as_deref().unwrap_or(""))
            .collect();
        assert!(
            reasons[0].contains("evil.example.com:443 is not allowed"),
            "{reasons:?}"
        );
        assert!(
            reasons[1].contains("no host carries connections"),
            "{reasons:?}"
        );
        assert!(record.connections.iter().all(|c| !c.allowed));
    }

    /// An address of this machine's on an interface other than `lo`, if it has one (a UDP
    /// `connect` sends nothing).
    fn outside_address() -> Option<IpAddr> {
        let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
        s.connect("192.0.2.1:9").ok()?;
        Some(s.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
    }

    #[test]
    fn under_from_sandbox_the_supervisor_dials_without_a_host_and_the_host_hears_nothing() {
        let Some(ip) = outside_address() else {
            pitcrew_test_support::skip("needs a network interface besides lo with an address");
            return;
        };
        // An echo server on that address (not loopback: no mirror takes its port).
        let server = TcpListener::bind((ip, 0)).unwrap();
        let port = server.local_addr().unwrap().port();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = server.accept() {
                let mut got = Vec::new();
                let _ = s.read_to_end(&mut got);
                let _ = s.write_all(&got);
            }
        });
        let target = SocketAddr::new(ip, port).to_string();
        let policy = NetworkPolicy::Allow {
            allow: vec![Endpoint::parse(&target).unwrap()],
            from: DialFrom::Sandbox,
        };
        let mut egress = Egress::open(&policy, None, 1).unwrap();
        let mut agent = TcpStream::connect(("127.0.0.1", egress.proxy_port())).unwrap();
        agent
            .write_all(format!("CONNECT {target} HTTP/1.1\r\n\r\n").as_bytes())
            .unwrap();
        agent.set_nonblocking(true).unwrap();
        let mut got = Vec::new();
        let mut sent = false;
        let answer = b"HTTP/1.1 200 Connection established\r\n\r\n";
        for _ in 0..2000 {
            // No host holds the run: the supervisor's own dials need none.
            egress.service(false);
            let mut buf = [0u8; 512];
            match agent.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
            if !sent && got.starts_with(answer) {
                agent.write_all(b"straight out").unwrap();
                agent.shutdown(Shutdown::Write).unwrap();
                sent = true;
            }
        }
        let back = got.get(answer.len()..).unwrap_or_default();
        assert_eq!(String::from_utf8_lossy(back), "straight out", "{got:?}");
        assert!(sent && sent_nothing(&mut egress));
        let (record, frames) = egress.close();
        assert!(frames.is_empty(), "{frames:?}");
        assert_eq!(record.from.as_deref(), Some("sandbox"));
        let c = &record.connections[0];
        assert_eq!((c.allowed, c.from.as_deref()), (true, Some("sandbox")));
        assert_eq!((c.bytes_up, c.bytes_down), (12, 12));
    }

    #[test]
    fn under_from_sandbox_a_model_connection_still_goes_through_the_host() {
        let policy = NetworkPolicy::Allow {
            allow: vec![Endpoint::parse("api.anthropic.com:443").unwrap()],
            from: DialFrom::Sandbox,
        };
        let route = ModelRoute {
            base_url_env: Some("ANTHROPIC_BASE_URL".into()),
            pi_provider: None,
            upstream: Endpoint::parse("api.anthropic.com:443").unwrap(),
            rewritten_models_json: None,
            credentials: vec!["ANTHROPIC_API_KEY".into()],
        };
        let mut egress = Egress::open(&policy, Some(&route), 1).unwrap();
        let url = egress.model_listener_url().unwrap();
        let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
        let _agent = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let got = service_until_sent(&mut egress);
        assert!(
            matches!(
                got.first(),
                Some(Ok(Response::TunnelOpen { model: true, .. }))
            ),
            "{got:?}"
        );
    }

    /// Whether the egress has no frame for the host.
    fn sent_nothing(egress: &mut Egress) -> bool {
        egress.take_outbox().is_empty()
    }

    #[test]
    fn loopback_endpoints_are_mirrored_and_names_are_not() {
        let ep = |s: &str| Endpoint::parse(s).unwrap();
        assert_eq!(mirror_addresses(&ep("localhost:1")).len(), 2);
        assert_eq!(
            mirror_addresses(&ep("127.0.0.1:1")),
            [IpAddr::from(Ipv4Addr::LOCALHOST)]
        );
        assert!(mirror_addresses(&ep("example.com:1")).is_empty());
        assert!(mirror_addresses(&ep("10.0.0.1:1")).is_empty());
    }
}
