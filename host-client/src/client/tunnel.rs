//! The host's side of the agent's connections (`network: allow`, feature `network`): the
//! supervisor asks (`tunnel_open`), this side checks the policy again, resolves the name,
//! refuses addresses the agent must not reach through a name, dials ([`pitcrew_core::egress::address`]), and relays the bytes on
//! two threads per connection, within the flow-control window of
//! [`pitcrew_core::protocol::tunnel`].
//!
//! A *model connection* (`tunnel_open` with `model`) goes to this host's own model route
//! ([`ModelUpstream`]), whatever the message names beyond checking it: its requests are
//! rewritten on the way ([`pitcrew_core::model_http`]: each credential's value in place of its
//! placeholder, `Host` the upstream's), over TLS for an `https://` base URL; each credential
//! put in is said once per connection (`tunnel_injected`), by name, for the record.
//!
//! Writes to the control stream share the client's writer (the lease thread's too), one whole
//! frame under its lock at a time.

use super::upstream::{self, Upstream};
use pitcrew_core::egress::address;
use pitcrew_core::manifest::Endpoint;
use pitcrew_core::model_http::{Credential, RequestRewriter};

use pitcrew_core::manifest::NetworkPolicy;
use pitcrew_core::protocol::{tunnel, write_frame, Channel, Frame, Request, Response};
use std::collections::HashMap;
use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

/// How long a dial may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Where this host sends the agent's model requests, and the credentials it adds.
#[derive(Debug, Clone)]
pub struct ModelUpstream {
    /// The provider's host and port.
    pub endpoint: Endpoint,
    /// Whether the base URL is `https://`.
    pub tls: bool,
    /// The base URL's path (`/anthropic` of `https://gw.example/anthropic`), or empty.
    pub prefix: String,
    /// The credentials, values and all.
    pub credentials: Vec<Credential>,
}

impl ModelUpstream {
    /// The `Host` header the provider gets: its name, with the port unless the scheme's own.
    pub fn authority(&self) -> String {
        let default = if self.tls { 443 } else { 80 };
        let host = if self.endpoint.host.contains(':') {
            format!("[{}]", self.endpoint.host)
        } else {
            self.endpoint.host.clone()
        };
        if self.endpoint.port == default {
            host
        } else {
            format!("{host}:{}", self.endpoint.port)
        }
    }
}

/// What the client hands the carried connections' messages to.
pub trait Carrier: Send {
    /// A `tunnel_*` message from the supervisor.
    fn message(&mut self, response: Response);
    /// A channel-5 data frame's payload.
    fn data(&mut self, payload: &[u8]);
}

/// One carried connection, as the dispatching thread sees it.
struct Carried {
    /// Bytes for the socket (`None`: the agent finished writing).
    to_socket: mpsc::Sender<Option<Vec<u8>>>,
    /// What the reading thread may still send before the supervisor acknowledges it.
    credit: Arc<(Mutex<Credit>, Condvar)>,
    stream: TcpStream,
}

/// The reading thread's credit, and whether the connection ended.
struct Credit {
    bytes: u32,
    closed: bool,
}

/// The connections of one client.
pub struct Tunnels<W: Write + Send + 'static> {
    writer: Arc<Mutex<W>>,
    policy: NetworkPolicy,
    model: Option<Arc<ModelUpstream>>,
    conns: Arc<Mutex<HashMap<u32, Carried>>>,
    /// Connections being dialled, each with its dial's token, counted against the bound. A
    /// `tunnel_close` for one takes it out, and its dial, once done, carries nothing: a
    /// connection the supervisor ended (its iteration over) is never opened behind its back,
    /// nor under a later connection's id (the token is that dial's own).
    dialling: Arc<Mutex<HashMap<u32, u64>>>,
    /// The token of the next dial.
    next_dial: u64,
}

impl<W: Write + Send + 'static> Tunnels<W> {
    /// Carries connections under `policy`, writing to the control stream through `writer`;
    /// model connections go to `model`.
    pub fn new(
        writer: Arc<Mutex<W>>,
        policy: NetworkPolicy,
        model: Option<ModelUpstream>,
    ) -> Tunnels<W> {
        Tunnels {
            writer,
            policy,
            model: model.map(Arc::new),
            conns: Arc::new(Mutex::new(HashMap::new())),
            dialling: Arc::new(Mutex::new(HashMap::new())),
            next_dial: 0,
        }
    }

    fn open(&mut self, conn: u32, host: String, port: u16, model: bool) {
        // The dials first, then (not nested: `start` takes them in that order) the open ones;
        // a dial that moves between the two is counted twice, never missed.
        let (dials, dialled) = {
            let dialling = self.dialling.lock().unwrap_or_else(PoisonError::into_inner);
            (dialling.len(), dialling.contains_key(&conn))
        };
        let (open, opened) = {
            let conns = self.conns.lock().unwrap_or_else(PoisonError::into_inner);
            (conns.len(), conns.contains_key(&conn))
        };
        let (busy, taken) = (dials + open, dialled || opened);
        if taken {
            let reason = format!("connection {conn} is carried already");
            send(&self.writer, &Request::TunnelRefused { conn, reason });
            return;
        }
        if busy >= tunnel::MAX_OPEN {
            let reason = format!("{} connections are open already, the most at once", busy);
            send(&self.writer, &Request::TunnelRefused { conn, reason });
            return;
        }
        let route = match (model, &self.model) {
            (false, _) => None,
            (true, Some(m)) if m.endpoint.host == host && m.endpoint.port == port => {
                Some(Arc::clone(m))
            }
            (true, _) => {
                let reason = format!("{host}:{port} is not this host's model endpoint");
                send(&self.writer, &Request::TunnelRefused { conn, reason });
                return;
            }
        };
        let token = self.next_dial;
        self.next_dial += 1;
        self.dialling
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(conn, token);
        let writer = Arc::clone(&self.writer);
        let conns = Arc::clone(&self.conns);
        let dialling = Arc::clone(&self.dialling);
        let policy = self.policy.clone();
        std::thread::spawn(
            move || match dial_upstream(&policy, &host, port, route.as_deref()) {
                Ok(stream) => start((conn, token), stream, route, &writer, &conns, &dialling),
                Err(reason) => {
                    let wanted = take_dial(
                        &mut dialling.lock().unwrap_or_else(PoisonError::into_inner),
                        conn,
                        token,
                    );
                    tracing::info!("network: {host}:{port} refused: {reason}");
                    if wanted {
                        send(&writer, &Request::TunnelRefused { conn, reason });
                    }
                }
            },
        );
    }

    /// The supervisor ended `conn`: a dial under way is called off, an open connection ends.
    fn close(&mut self, conn: u32) {
        // Looked for among the dials first: a dial that finishes moves its connection into
        // `conns` while it holds `dialling`, so one not found there is in `conns` or gone.
        let was_dialling = self
            .dialling
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&conn)
            .is_some();
        if was_dialling {
            return;
        }
        let gone = self
            .conns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&conn);
        if let Some(c) = gone {
            end(&c);
        }
    }
}

impl<W: Write + Send + 'static> Carrier for Tunnels<W> {
    fn message(&mut self, response: Response) {
        match response {
            Response::TunnelOpen {
                conn,
                host,
                port,
                model,
            } => self.open(conn, host, port, model),
            Response::TunnelAck { conn, bytes } => {
                let conns = self.conns.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(c) = conns.get(&conn) {
                    let (lock, wake) = &*c.credit;
                    let mut credit = lock.lock().unwrap_or_else(PoisonError::into_inner);
                    credit.bytes = credit.bytes.saturating_add(bytes).min(tunnel::WINDOW);
                    wake.notify_all();
                }
            }
            Response::TunnelClose { conn, .. } => self.close(conn),
            _ => {}
        }
    }

    fn data(&mut self, payload: &[u8]) {
        let Some((conn, bytes)) = tunnel::decode(payload) else {
            return;
        };
        let conns = self.conns.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = conns.get(&conn) {
            let bytes = (!bytes.is_empty()).then(|| bytes.to_vec());
            let _ = c.to_socket.send(bytes);
        }
    }
}

impl<W: Write + Send + 'static> Drop for Tunnels<W> {
    fn drop(&mut self) {
        // Dials under way carry nothing once done.
        self.dialling
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        let conns = std::mem::take(&mut *self.conns.lock().unwrap_or_else(PoisonError::into_inner));
        for c in conns.values() {
            end(c);
        }
    }
}

/// Ends a connection: its socket shut, its reading thread woken to leave.
fn end(c: &Carried) {
    let _ = c.stream.shutdown(Shutdown::Both);
    let (lock, wake) = &*c.credit;
    lock.lock().unwrap_or_else(PoisonError::into_inner).closed = true;
    wake.notify_all();
}

/// Sends one control message; a failure is the control stream's, which the client sees.
fn send<W: Write>(writer: &Mutex<W>, request: &Request) {
    send_frame(writer, &Frame::control(request));
}

fn send_frame<W: Write>(writer: &Mutex<W>, frame: &Frame) {
    let mut w = writer.lock().unwrap_or_else(PoisonError::into_inner);
    if write_frame(&mut *w, frame)
        .and_then(|()| w.flush())
        .is_err()
    {
        tracing::debug!("network: the control stream is gone");
    }
}

/// Registers a dialled connection, says so, and starts its two relaying threads; a connection
/// the supervisor ended while it was dialled is shut instead, and nothing is said.
fn start<W: Write + Send + 'static>(
    (conn, token): (u32, u64),
    stream: Upstream,
    route: Option<Arc<ModelUpstream>>,
    writer: &Arc<Mutex<W>>,
    conns: &Arc<Mutex<HashMap<u32, Carried>>>,
    dialling: &Mutex<HashMap<u32, u64>>,
) {
    let _ = stream.tcp().set_nodelay(true);
    let (Ok(reading), Ok(writing), Ok(kept)) = (
        stream.try_clone(),
        stream.try_clone(),
        stream.tcp().try_clone(),
    ) else {
        let _ = stream.tcp().shutdown(Shutdown::Both);
        if take_dial(
            &mut dialling.lock().unwrap_or_else(PoisonError::into_inner),
            conn,
            token,
        ) {
            let reason = "cannot share the dialled socket between threads".to_string();
            send(writer, &Request::TunnelRefused { conn, reason });
        }
        return;
    };
    let credit = Arc::new((
        Mutex::new(Credit {
            bytes: tunnel::WINDOW,
            closed: false,
        }),
        Condvar::new(),
    ));
    let (to_socket, from_host) = mpsc::channel();
    {
        // Moved from the dials to the open connections in one step under `dialling`'s lock,
        // so a `tunnel_close` finds it in one or the other.
        let mut dials = dialling.lock().unwrap_or_else(PoisonError::into_inner);
        if !take_dial(&mut dials, conn, token) {
            drop(dials);
            tracing::info!("network: connection {conn} ended while it was dialled; closed");
            let _ = stream.tcp().shutdown(Shutdown::Both);
            return;
        }
        conns.lock().unwrap_or_else(PoisonError::into_inner).insert(
            conn,
            Carried {
                to_socket,
                credit: Arc::clone(&credit),
                stream: kept,
            },
        );
    }
    send(writer, &Request::TunnelOpened { conn });
    let w = Arc::clone(writer);
    let rewriter = route.map(|m| RequestRewriter::new(&m.credentials, &m.authority(), &m.prefix));
    std::thread::spawn(move || write_socket(conn, writing, rewriter, &from_host, &w));
    let w = Arc::clone(writer);
    std::thread::spawn(move || read_socket(conn, reading, &credit, &w));
}

/// Takes dial `token` of connection `conn` out of `dialling`; false when it is not there (the
/// supervisor ended the connection, and its id may be another dial's now).
fn take_dial(dialling: &mut HashMap<u32, u64>, conn: u32, token: u64) -> bool {
    if dialling.get(&conn) != Some(&token) {
        return false;
    }
    dialling.remove(&conn);
    true
}

/// Writes what the agent sent to the endpoint (through `rewriter` on a model connection),
/// acknowledging each write.
fn write_socket<W: Write>(
    conn: u32,
    mut stream: Upstream,
    mut rewriter: Option<RequestRewriter>,
    from_host: &mpsc::Receiver<Option<Vec<u8>>>,
    writer: &Mutex<W>,
) {
    let mut rewritten = Vec::new();
    while let Ok(next) = from_host.recv() {
        let Some(bytes) = next else {
            stream.shutdown_write();
            return;
        };
        let out = match rewriter.as_mut() {
            None => &bytes,
            Some(r) => {
                rewritten.clear();
                if let Err(why) = r.feed(&bytes, &mut rewritten) {
                    tracing::info!("network: model connection {conn}: {why}");
                    let reason = format!("model request: {why}");
                    let _ = stream.tcp().shutdown(Shutdown::Both);
                    send(writer, &Request::TunnelClose { conn, reason });
                    return;
                }
                let names = r.take_injected();
                if !names.is_empty() {
                    send(writer, &Request::TunnelInjected { conn, names });
                }
                &rewritten
            }
        };
        if let Err(err) = stream.write_all(out) {
            let reason = format!("writing to the endpoint: {err}");
            send(writer, &Request::TunnelClose { conn, reason });
            return;
        }
        let bytes = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        send(writer, &Request::TunnelAck { conn, bytes });
    }
}

/// Reads what the endpoint sends and forwards it within the credit.
fn read_socket<W: Write>(
    conn: u32,
    mut stream: Upstream,
    credit: &(Mutex<Credit>, Condvar),
    writer: &Mutex<W>,
) {
    let mut buf = vec![0u8; tunnel::CHUNK];
    loop {
        let room = {
            let (lock, wake) = credit;
            let mut c = lock.lock().unwrap_or_else(PoisonError::into_inner);
            while c.bytes == 0 && !c.closed {
                c = wake.wait(c).unwrap_or_else(PoisonError::into_inner);
            }
            if c.closed {
                return;
            }
            (c.bytes as usize).min(buf.len())
        };
        match stream.read(&mut buf[..room]) {
            Ok(0) => {
                send_frame(
                    writer,
                    &Frame::data(Channel::Tunnel, tunnel::encode(conn, &[])),
                );
                return;
            }
            Ok(n) => {
                credit
                    .0
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .bytes -= u32::try_from(n).unwrap_or(0);
                let frame = Frame::data(Channel::Tunnel, tunnel::encode(conn, &buf[..n]));
                send_frame(writer, &frame);
            }
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => {
                if !credit
                    .0
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .closed
                {
                    let reason = format!("reading from the endpoint: {err}");
                    send(writer, &Request::TunnelClose { conn, reason });
                }
                return;
            }
        }
    }
}

/// Dials `host`:`port` under `policy`, and for a model connection to an `https://` base URL
/// makes the TLS session.
fn dial_upstream(
    policy: &NetworkPolicy,
    host: &str,
    port: u16,
    route: Option<&ModelUpstream>,
) -> Result<Upstream, String> {
    let tcp = address::dial(policy, host, port, DIAL_TIMEOUT)?;
    match route {
        Some(m) if m.tls => upstream::tls(tcp, host, DIAL_TIMEOUT),
        _ => Ok(Upstream::Plain(tcp)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn allow(list: &[&str]) -> NetworkPolicy {
        NetworkPolicy::allow(list.iter().map(|e| Endpoint::parse(e).unwrap()).collect())
    }

    fn written(writer: &Mutex<Vec<u8>>) -> String {
        String::from_utf8_lossy(&writer.lock().unwrap()).into_owned()
    }

    /// Waits (a bounded number of short sleeps) until the control stream holds `what`.
    fn wait_for(writer: &Mutex<Vec<u8>>, what: &str) -> String {
        for _ in 0..1000 {
            let text = written(writer);
            if text.contains(what) {
                return text;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("never written: {what}; got {}", written(writer))
    }

    fn route(port: u16) -> ModelUpstream {
        ModelUpstream {
            endpoint: Endpoint::parse(&format!("127.0.0.1:{port}")).unwrap(),
            tls: false,
            prefix: "/v1".into(),
            credentials: vec![Credential {
                name: "K".into(),
                placeholder: b"pitcrew-placeholder-K".to_vec(),
                value: b"real-value".to_vec(),
            }],
        }
    }

    #[test]
    fn a_model_connection_goes_to_the_route_with_the_key_put_in_and_says_so() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let writer = Arc::new(Mutex::new(Vec::new()));
        let policy = allow(&[&format!("127.0.0.1:{port}")]);
        let mut t = Tunnels::new(Arc::clone(&writer), policy, Some(route(port)));
        t.message(Response::TunnelOpen {
            conn: 1,
            host: "127.0.0.1".into(),
            port,
            model: true,
        });
        let (mut upstream, _) = listener.accept().unwrap();
        wait_for(&writer, "tunnel_opened");
        // Split mid-placeholder: the head is rewritten once it is whole.
        t.data(&tunnel::encode(
            1,
            b"GET /models HTTP/1.1\r\nx-api-key: pitcrew-place",
        ));
        t.data(&tunnel::encode(1, b"holder-K\r\n\r\n"));
        let mut got = Vec::new();
        let mut buf = [0u8; 256];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = upstream.read(&mut buf).unwrap();
            assert!(n > 0, "the upstream saw: {got:?}");
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(
            String::from_utf8_lossy(&got),
            format!("GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nx-api-key: real-value\r\n\r\n")
        );
        let said = wait_for(&writer, "tunnel_injected");
        assert!(said.contains(r#""names":["K"]"#), "{said}");
        assert!(!said.contains("real-value"), "{said}");
    }

    #[test]
    fn a_model_connection_to_an_https_base_url_goes_over_tls_trusting_ssl_cert_file() {
        let (ca, cert, key) = crate::client::upstream::tests::test_ca();
        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca).unwrap();
        // Read once per process (nextest runs each test in a process of its own).
        std::env::set_var("SSL_CERT_FILE", &ca_file);
        let port = crate::client::upstream::tests::echo_server(cert, key);
        let writer = Arc::new(Mutex::new(Vec::new()));
        let policy = allow(&[&format!("localhost:{port}")]);
        let mut model = route(port);
        model.endpoint = Endpoint::parse(&format!("localhost:{port}")).unwrap();
        model.tls = true;
        let mut t = Tunnels::new(Arc::clone(&writer), policy, Some(model));
        t.message(Response::TunnelOpen {
            conn: 1,
            host: "localhost".into(),
            port,
            model: true,
        });
        wait_for(&writer, "tunnel_opened");
        for _ in 0..2 {
            t.data(&tunnel::encode(
                1,
                b"GET /m HTTP/1.1\r\nx-api-key: pitcrew-placeholder-K\r\n\r\n",
            ));
        }
        // The server answers each request head with itself as the body, back through channel 5.
        let head = format!(
            "GET /v1/m HTTP/1.1\r\nHost: localhost:{port}\r\nx-api-key: real-value\r\n\r\n"
        );
        for _ in 0..1000 {
            if carried_back(&writer, 1).matches(&head).count() == 2 {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("never carried back: {}", carried_back(&writer, 1));
    }

    /// The bytes of connection `conn` in the channel-5 frames written so far.
    fn carried_back(writer: &Mutex<Vec<u8>>, conn: u32) -> String {
        let bytes = writer.lock().unwrap().clone();
        let mut r = std::io::Cursor::new(bytes);
        let mut out = Vec::new();
        while let Ok(Some(frame)) = pitcrew_core::protocol::read_frame(&mut r) {
            if frame.channel == Channel::Tunnel {
                if let Some((c, data)) = tunnel::decode(&frame.payload) {
                    if c == conn {
                        out.extend_from_slice(data);
                    }
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn a_model_connection_to_another_endpoint_or_without_a_route_is_refused() {
        let writer = Arc::new(Mutex::new(Vec::new()));
        let policy = allow(&["127.0.0.1:9", "127.0.0.1:10"]);
        let mut t = Tunnels::new(Arc::clone(&writer), policy.clone(), Some(route(9)));
        t.message(Response::TunnelOpen {
            conn: 1,
            host: "127.0.0.1".into(),
            port: 10,
            model: true,
        });
        let said = written(&writer);
        assert!(said.contains("tunnel_refused"), "{said}");
        assert!(said.contains("not this host's model endpoint"), "{said}");
        let writer = Arc::new(Mutex::new(Vec::new()));
        let mut t = Tunnels::new(Arc::clone(&writer), policy, None);
        t.message(Response::TunnelOpen {
            conn: 2,
            host: "127.0.0.1".into(),
            port: 9,
            model: true,
        });
        assert!(written(&writer).contains("tunnel_refused"));
    }

    #[test]
    fn a_dial_called_off_carries_nothing_even_under_its_id_dialled_again() {
        let mut dialling = HashMap::from([(1, 10)]);
        // The supervisor ended connection 1; a later one got the same id and a dial of its own.
        dialling.remove(&1);
        dialling.insert(1, 11);
        assert!(
            !take_dial(&mut dialling, 1, 10),
            "the old dial took the new one's place"
        );
        assert!(take_dial(&mut dialling, 1, 11));
        assert!(!take_dial(&mut dialling, 1, 11));
    }
}
