#![allow(non_snake_case)] // attack tests are named attack_<class>__<case> (scripts/security-report)
//! Egress control with the local engine: a `command` agent (a Python probe) in a network
//! namespace with loopback only, its allowed connections carried by `pitcrew run` on the host
//! (a mirror of an allowed loopback endpoint, the `CONNECT` proxy for names), every attempt in
//! the record; and attacks from the agent's side, each ending in a refusal.
//!
//! A *networked* sandbox is one the local engine started for a `network: open` harness: it
//! shares this machine's network namespace (`eth0` and all), and a later `none` or `allow`
//! harness run in it (`--sandbox ID`) gets the agent a namespace of its own
//! ([`probe_networked`]).
//!
//! Needs root, PID namespaces and python3; skipped otherwise, or a failure with
//! `PITCREW_REQUIRE_E2E=1`.

use pitcrew_e2e::LocalFixture;
use pitcrew_e2e::{iteration_dir, pitcrew_run_status, read_json, require_pid_namespaces};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

/// An echo server on the host's 127.0.0.1: each connection gets back what it sent, once the
/// client finished writing. Returns its port.
fn echo_server() -> u16 {
    echo_server_on("127.0.0.1")
}

/// [`echo_server`] on `addr` (`0.0.0.0`: every address of this machine's).
fn echo_server_on(addr: &str) -> u16 {
    let listener = TcpListener::bind((addr, 0)).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || echo(stream));
        }
    });
    port
}

fn echo(mut stream: TcpStream) {
    let mut got = Vec::new();
    if stream.read_to_end(&mut got).is_ok() {
        let _ = stream.write_all(&got);
    }
}

/// The probe's prelude: helpers the cases call, writing `output/probe.json`.
const PRELUDE: &str = r#"
import errno, json, os, socket
res = {}
def err(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))
def echo_via(addr, data):
    s = socket.create_connection(addr, timeout=20)
    s.sendall(data); s.shutdown(socket.SHUT_WR)
    out = b""
    while True:
        d = s.recv(65536)
        if not d: break
        out += d
    return out.decode()
def proxy(host, port, data=b"through the proxy"):
    pport = int(os.environ["HTTPS_PROXY"].rsplit(":", 1)[1])
    s = socket.create_connection(("127.0.0.1", pport), timeout=20)
    s.sendall(("CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host, port, host, port)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        d = s.recv(1)
        if not d: break
        head += d
    status = head.split(b" ")[1].decode() if head else "none"
    if status != "200":
        rest = s.recv(4096).decode(errors="replace")
        return status, rest
    s.sendall(data); s.shutdown(socket.SHUT_WR)
    out = b""
    while True:
        d = s.recv(65536)
        if not d: break
        out += d
    return status, out.decode()
"#;

/// Runs `cases` (Python, after [`PRELUDE`]) as the agent under `network`; returns what the
/// probe wrote and the iteration's record. `None` when the prerequisites are missing.
fn probe(network: &str, cases: &str) -> Option<(Value, Value)> {
    if !require_pid_namespaces() {
        return None;
    }
    let code =
        format!("{PRELUDE}\n{cases}\nopen('output/probe.json', 'w').write(json.dumps(res))\n");
    let script = format!("mkdir -p output\npython3 - <<'PROBE'\n{code}PROBE\n");
    let fx = LocalFixture::new(&script, 1, &format!("keep_output: true\n{network}"), false);
    let (code, doc) = pitcrew_run_status(&fx.harness, &fx.state, &[], &[]);
    let dir = iteration_dir(&doc, 1);
    let record = read_json(&dir.join("result.json"));
    assert_eq!(code, Some(0), "{doc:#}\n{record:#}");
    let probe = read_json(&dir.join("output/probe.json"));
    Some((probe, record))
}

/// [`probe`] in a networked sandbox: one the local engine started for a `network: open`
/// harness (this machine's network namespace), kept, then given the probe's harness under
/// `network` (its second iteration). `None` when the prerequisites are missing.
fn probe_networked(network: &str, cases: &str) -> Option<(Value, Value)> {
    if !require_pid_namespaces()
        || !pitcrew_e2e::prerequisite(
            outside_address().is_some(),
            "needs a network interface besides lo with an address (a sandbox with this \
             machine's network has nothing to keep the agent from otherwise)",
        )
    {
        return None;
    }
    let fx = LocalFixture::new("true\n", 1, "network: open\n", false);
    let h = fx.harness.to_str().expect("utf-8 path");
    let kept = fx.output(&["run", h, "--json", "--keep"]);
    let doc: Value = serde_json::from_slice(&kept.stdout).expect("json");
    assert!(kept.status.success(), "{doc:#}");
    let id = doc["sandbox"].as_str().expect("sandbox id").to_string();
    let code =
        format!("{PRELUDE}\n{cases}\nopen('output/probe.json', 'w').write(json.dumps(res))\n");
    let script = format!("mkdir -p output\npython3 - <<'PROBE'\n{code}PROBE\n");
    let extra = format!("keep_output: true\n{network}");
    let harness = pitcrew_e2e::write_command_harness(&fx.root, &script, 1, "60s", false, &extra);
    let (code, doc) = pitcrew_run_status(&harness, &fx.state, &["--sandbox", &id], &[]);
    let _ = fx.output(&["down", &id]);
    let dir = iteration_dir(&doc, 2);
    let record = read_json(&dir.join("result.json"));
    assert_eq!(code, Some(0), "{doc:#}\n{record:#}");
    let probe = read_json(&dir.join("output/probe.json"));
    Some((probe, record))
}

/// An address of this machine's on an interface other than `lo` (the source address it would
/// use towards a public address; a UDP `connect` sends nothing), if it has one.
fn outside_address() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    Some(s.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
}

/// The record's connections.
fn connections(record: &Value) -> Vec<Value> {
    record["network"]["connections"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn an_allowed_loopback_endpoint_is_mirrored_and_a_name_goes_through_the_proxy() {
    let mirrored = echo_server();
    let named = echo_server();
    let network = format!("network:\n  allow: [\"127.0.0.1:{mirrored}\", \"localhost:{named}\"]\n");
    let cases = format!(
        "res['mirror'] = echo_via(('127.0.0.1', {mirrored}), b'hello mirror')\n\
         res['proxy'] = proxy('localhost', {named})\n\
         res['refused'] = proxy('example.com', 443)\n\
         res['env'] = [os.environ.get(k) for k in ('NO_PROXY', 'NODE_USE_ENV_PROXY')]\n"
    );
    let Some((probe, record)) = probe(&network, &cases) else {
        return;
    };
    assert_eq!(probe["mirror"], "hello mirror", "{probe:#}");
    assert_eq!(probe["proxy"][0], "200", "{probe:#}");
    assert_eq!(probe["proxy"][1], "through the proxy", "{probe:#}");
    assert_eq!(probe["refused"][0], "403", "{probe:#}");
    assert!(probe["refused"][1]
        .as_str()
        .unwrap_or_default()
        .contains("example.com:443 is not allowed"));
    assert_eq!(
        probe["env"],
        serde_json::json!(["localhost,127.0.0.1,::1", "1"])
    );
    assert_eq!(record["network"]["mode"], "allow");
    let conns = connections(&record);
    let find = |via: &str, port: u64| {
        conns
            .iter()
            .find(|c| c["via"] == via && c["port"] == port)
            .cloned()
            .unwrap_or_else(|| panic!("no {via} connection to {port}: {conns:#?}"))
    };
    let m = find("mirror", u64::from(mirrored));
    assert_eq!(m["allowed"], true);
    assert_eq!(m["bytes_up"], 12);
    assert_eq!(m["bytes_down"], 12);
    let p = find("proxy", u64::from(named));
    assert_eq!(p["host"], "localhost");
    assert_eq!(
        (p["allowed"].clone(), p["bytes_up"].clone()),
        (true.into(), 17.into())
    );
    let r = find("proxy", 443);
    assert_eq!(r["allowed"], false);
    assert!(r["reason"]
        .as_str()
        .unwrap_or_default()
        .contains("not allowed"));
}

#[test]
fn attack_egress__direct_tcp_udp_dns_and_ipv6_find_no_route() {
    let cases = "\
res['tcp'] = err(lambda: socket.create_connection(('93.184.216.34', 80), timeout=5))
def udp():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.sendto(b'x', ('8.8.8.8', 53))
res['udp'] = err(udp)
def dns():
    try:
        socket.getaddrinfo('example.com', 443)
        return 'resolved'
    except socket.gaierror as e:
        return 'gaierror'
res['dns'] = dns()
def v6():
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(('2606:4700::1111', 443))
res['ipv6'] = err(v6)
";
    let Some((probe, record)) = probe("network: none\n", cases) else {
        return;
    };
    assert_eq!(probe["tcp"], "ENETUNREACH", "{probe:#}");
    assert_eq!(probe["udp"], "ENETUNREACH", "{probe:#}");
    assert_eq!(probe["dns"], "gaierror", "{probe:#}");
    assert_eq!(probe["ipv6"], "ENETUNREACH", "{probe:#}");
    assert_eq!(record["network"]["mode"], "none");
    assert!(connections(&record).is_empty());
}

#[test]
fn attack_egress__raw_and_packet_sockets_are_refused() {
    let cases = "\
res['raw'] = err(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
res['packet'] = err(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0))
";
    let Some((probe, _)) = probe("network: none\n", cases) else {
        return;
    };
    assert_eq!(probe["raw"], "EPERM", "{probe:#}");
    // Not a family the agent's seccomp filter lets it create (nor CAP_NET_RAW's to make).
    assert_eq!(probe["packet"], "EAFNOSUPPORT", "{probe:#}");
}

/// A vsock socket is no network namespace's: on a virtual machine (Firecracker, Hyper-V's
/// `hv_sock`, a cloud VM with a vsock device) an `AF_VSOCK` connection from the agent's
/// loopback-only namespace still goes to the hypervisor's host (CID 2), past pitcrew's proxy and
/// unrecorded. Docker's and containerd's default seccomp profiles refuse `socket(AF_VSOCK)`;
/// under `none` the agent must not get one either. Skipped where this kernel has no vsock.
#[test]
fn attack_egress__a_vsock_socket_is_refused() {
    // SAFETY: socket takes plain integers and returns a new descriptor or -1.
    let fd = unsafe { libc::socket(libc::AF_VSOCK, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    let here = fd >= 0;
    if here {
        // SAFETY: `fd` was just returned by socket and is owned by nothing else.
        unsafe { libc::close(fd) };
    }
    if !pitcrew_e2e::prerequisite(here, "needs a kernel with vsock (CONFIG_VSOCKETS)") {
        return;
    }
    let cases = "\
res['vsock'] = err(lambda: socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM))
";
    let Some((probe, _)) = probe("network: none\n", cases) else {
        return;
    };
    assert_ne!(
        probe["vsock"], "ok",
        "the agent made an AF_VSOCK socket: {probe:#}"
    );
}

#[test]
fn attack_egress__a_listener_of_the_agents_cannot_take_pitcrews_ports_or_get_its_traffic() {
    let port = echo_server();
    let network = format!("network:\n  allow: [\"127.0.0.1:{port}\"]\n");
    let cases = format!(
        "def bind(p):\n    s = socket.socket(); s.bind(('127.0.0.1', p)); s.listen(1); return s\n\
         res['mirror_port'] = err(lambda: bind({port}))\n\
         pport = int(os.environ['HTTPS_PROXY'].rsplit(':', 1)[1])\n\
         res['proxy_port'] = err(lambda: bind(pport))\n\
         own = bind(0)\n\
         own.settimeout(2)\n\
         res['mirror'] = echo_via(('127.0.0.1', {port}), b'mine')\n\
         res['own_got'] = err(lambda: own.accept())\n"
    );
    let Some((probe, record)) = probe(&network, &cases) else {
        return;
    };
    assert_eq!(probe["mirror_port"], "EADDRINUSE", "{probe:#}");
    assert_eq!(probe["proxy_port"], "EADDRINUSE", "{probe:#}");
    assert_eq!(probe["mirror"], "mine", "{probe:#}");
    // Python's accept timeout is an OSError without an errno.
    assert_ne!(probe["own_got"], "ok", "{probe:#}");
    assert_eq!(connections(&record).len(), 1, "{record:#}");
}

#[test]
fn attack_egress__a_leftover_process_connects_to_nothing_after_the_iteration() {
    let port = echo_server();
    let network = format!("network:\n  allow: [\"127.0.0.1:{port}\"]\n");
    // A child that outlives the agent and tries to connect once it is gone.
    let cases = format!(
        "import subprocess\n\
         subprocess.Popen(['python3', '-c', 'import socket, time\\ntime.sleep(1)\\nsocket.create_connection((\"127.0.0.1\", {port}), timeout=5)\\nopen(\"output/late\", \"w\").write(\"connected\")'], start_new_session=True)\n\
         res['started'] = True\n"
    );
    let Some((probe, record)) = probe(&network, &cases) else {
        return;
    };
    assert_eq!(probe["started"], true);
    assert!(connections(&record).is_empty(), "{record:#}");
    assert!(
        record["reaped"]["after"].as_u64().unwrap_or(0) >= 1,
        "{record:#}"
    );
}

#[test]
fn attack_egress__a_flood_of_connections_is_bounded_and_named() {
    let port = echo_server();
    let network = format!("network:\n  allow: [\"127.0.0.1:{port}\"]\n");
    let cases = format!(
        "import time\n\
         held = []\n\
         for i in range(100):\n    \
             try:\n        held.append(socket.create_connection(('127.0.0.1', {port}), timeout=5))\n    \
             except OSError:\n        pass\n\
         time.sleep(2)\n\
         res['opened'] = len(held)\n"
    );
    let Some((_, record)) = probe(&network, &cases) else {
        return;
    };
    let conns = connections(&record);
    let refused: Vec<&Value> = conns.iter().filter(|c| c["allowed"] == false).collect();
    assert!(!refused.is_empty(), "{conns:#?}");
    assert!(
        refused.iter().any(|c| c["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("64 connections")),
        "{refused:#?}"
    );
    assert!(conns.iter().filter(|c| c["allowed"] == true).count() <= 64);
}

/// The probe's cases of a network namespace with loopback only: its interfaces and routes,
/// direct TCP to this machine's outside address and to a port of its loopback the policy does
/// not allow, UDP, DNS, IPv6, and an abstract Unix socket bound in the sandbox's namespace.
fn isolation_cases(
    outside: Option<std::net::IpAddr>,
    loopback_port: u16,
    abstract_name: &str,
) -> String {
    let outside = outside.map(|ip| ip.to_string()).unwrap_or_default();
    format!(
        "res['dev'] = [l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]]\n\
         res['routes'] = len(open('/proc/net/route').read().splitlines()) - 1\n\
         res['outside'] = err(lambda: socket.create_connection(('{outside}', {loopback_port}), timeout=5)) if '{outside}' else 'ENETUNREACH'\n\
         res['loopback'] = err(lambda: socket.create_connection(('127.0.0.1', {loopback_port}), timeout=5))\n\
         def udp():\n    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n    u.sendto(b'x', ('8.8.8.8', 53))\n\
         res['udp'] = err(udp)\n\
         def dns():\n    try:\n        socket.getaddrinfo('example.com', 443)\n        return 'resolved'\n    except socket.gaierror:\n        return 'gaierror'\n\
         res['dns'] = dns()\n\
         def v6():\n    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)\n    s.settimeout(5)\n    s.connect(('2606:4700::1111', 443))\n\
         res['ipv6'] = err(v6)\n\
         def abstract():\n    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n    s.connect('\\0{abstract_name}')\n\
         res['abstract'] = err(abstract)\n"
    )
}

/// What [`isolation_cases`] must find: nothing but the agent's own loopback.
fn assert_isolated(probe: &Value) {
    assert_eq!(probe["dev"], serde_json::json!(["lo"]), "{probe:#}");
    assert_eq!(probe["routes"], 0, "{probe:#}");
    assert_eq!(probe["outside"], "ENETUNREACH", "{probe:#}");
    assert_eq!(probe["loopback"], "ECONNREFUSED", "{probe:#}");
    assert_eq!(probe["udp"], "ENETUNREACH", "{probe:#}");
    assert_eq!(probe["dns"], "gaierror", "{probe:#}");
    assert_eq!(probe["ipv6"], "ENETUNREACH", "{probe:#}");
    assert_eq!(probe["abstract"], "ECONNREFUSED", "{probe:#}");
}

/// A listener on an abstract Unix socket name in this process's network namespace (the
/// networked sandbox's): its name, and whether anyone connected when asked.
fn abstract_listener() -> (String, std::os::unix::net::UnixListener) {
    use std::os::linux::net::SocketAddrExt as _;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let name = format!("pitcrew-egress-abstract-{}", std::process::id());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract name");
    let listener = UnixListener::bind_addr(&addr).expect("bind abstract");
    listener.set_nonblocking(true).expect("nonblocking");
    (name, listener)
}

/// `network: none` in a sandbox that has this machine's network: the agent runs in a network
/// namespace of its own with loopback only (the record says `namespace: agent`), and nothing of
/// the sandbox's network reaches it: not its interfaces, its loopback, its abstract sockets.
#[test]
fn attack_egress__in_a_networked_sandbox_none_gets_the_agent_a_namespace_with_loopback_only() {
    let (name, listener) = abstract_listener();
    let port = echo_server_on("0.0.0.0");
    let cases = isolation_cases(outside_address(), port, &name);
    let Some((probe, record)) = probe_networked("network: none\n", &cases) else {
        return;
    };
    assert_isolated(&probe);
    assert!(
        listener.accept().is_err(),
        "the abstract socket was reached"
    );
    assert_eq!(record["network"]["mode"], "none", "{record:#}");
    assert_eq!(record["network"]["namespace"], "agent", "{record:#}");
    assert!(connections(&record).is_empty());
}

/// `network: allow` in a sandbox that has this machine's network: the agent's allowed
/// connections go through the listeners in its own namespace (a mirror, the proxy) and are
/// carried by the host, every one recorded; everything else finds no route.
#[test]
fn attack_egress__in_a_networked_sandbox_allow_reaches_only_what_is_allowed_through_pitcrew() {
    let (name, listener) = abstract_listener();
    let mirrored = echo_server();
    let named = echo_server();
    let unlisted = echo_server_on("0.0.0.0");
    let network = format!("network:\n  allow: [\"127.0.0.1:{mirrored}\", \"localhost:{named}\"]\n");
    let cases = format!(
        "res['mirror'] = echo_via(('127.0.0.1', {mirrored}), b'hello mirror')\n\
         res['proxy'] = proxy('localhost', {named})\n\
         res['refused'] = proxy('localhost', {unlisted})\n{}",
        isolation_cases(outside_address(), unlisted, &name)
    );
    let Some((probe, record)) = probe_networked(&network, &cases) else {
        return;
    };
    assert_eq!(probe["mirror"], "hello mirror", "{probe:#}");
    assert_eq!(probe["proxy"][0], "200", "{probe:#}");
    assert_eq!(probe["proxy"][1], "through the proxy", "{probe:#}");
    assert_eq!(probe["refused"][0], "403", "{probe:#}");
    assert_isolated(&probe);
    assert!(
        listener.accept().is_err(),
        "the abstract socket was reached"
    );
    assert_eq!(record["network"]["namespace"], "agent", "{record:#}");
    let conns = connections(&record);
    assert_eq!(conns.len(), 3, "{conns:#?}");
    assert_eq!(
        (conns[0]["via"].as_str(), conns[0]["allowed"].as_bool()),
        (Some("mirror"), Some(true))
    );
    assert_eq!(conns[0]["bytes_up"], 12, "{conns:#?}");
    assert_eq!(
        (conns[1]["via"].as_str(), conns[1]["allowed"].as_bool()),
        (Some("proxy"), Some(true))
    );
    assert_eq!(conns[2]["allowed"], false, "{conns:#?}");
}

/// In a networked sandbox too, a process the agent leaves behind gets nothing once the
/// iteration ended: it is reaped, and the listeners it would connect to are gone with the
/// agent's namespace.
#[test]
fn attack_egress__in_a_networked_sandbox_a_leftover_process_connects_to_nothing() {
    let port = echo_server();
    let network = format!("network:\n  allow: [\"127.0.0.1:{port}\"]\n");
    let cases = format!(
        "import subprocess\n\
         subprocess.Popen(['python3', '-c', 'import socket, time\\ntime.sleep(1)\\nsocket.create_connection((\"127.0.0.1\", {port}), timeout=5)\\nopen(\"output/late\", \"w\").write(\"connected\")'], start_new_session=True)\n\
         res['started'] = True\n"
    );
    let Some((probe, record)) = probe_networked(&network, &cases) else {
        return;
    };
    assert_eq!(probe["started"], true);
    assert_eq!(record["network"]["namespace"], "agent", "{record:#}");
    assert!(connections(&record).is_empty(), "{record:#}");
    assert!(
        record["reaped"]["after"].as_u64().unwrap_or(0) >= 1,
        "{record:#}"
    );
}

/// `network: {platform: openshell}` names the platform's own egress policy: pitcrew takes the
/// sandbox's network as it is (the local engine shares this machine's), says so, and launches
/// the agent only where the platform's proxy is in its environment; the record names the
/// platform.
#[test]
fn a_named_platform_policy_runs_on_the_sandboxs_network_only_with_its_proxy_in_place() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = LocalFixture::new(
        "mkdir -p output && echo \"proxy=$HTTPS_PROXY\" > output/ran\n",
        1,
        "network:\n  platform: openshell\n",
        false,
    );
    let (code, out, err) =
        pitcrew_e2e::pitcrew_output(&["validate".as_ref(), fx.harness.as_os_str()], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("network: platform openshell"), "{out}");
    assert!(
        err.contains("warning: network: platform openshell: the platform's own policy"),
        "{err}"
    );
    // No proxy in the agent's environment: nothing says the platform's policy holds it.
    let (code, doc) = pitcrew_run_status(&fx.harness, &fx.state, &[], &[]);
    assert_eq!(code, Some(125), "{doc:#}");
    let record = read_json(&iteration_dir(&doc, 1).join("result.json"));
    let reason = record["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("openshell's egress policy") && reason.contains("HTTPS_PROXY"),
        "{reason}"
    );
    assert!(!iteration_dir(&doc, 1).join("output/ran").exists());
    // The platform's proxy in place (here from the operator's environment): the agent runs on
    // the sandbox's network, and the record names the platform.
    let proxy = "http://127.0.0.1:3128";
    let (code, doc) = pitcrew_run_status(
        &fx.harness,
        &fx.state,
        &["--pass-env", "HTTPS_PROXY"],
        &[("HTTPS_PROXY", proxy)],
    );
    assert_eq!(code, Some(0), "{doc:#}");
    let it = iteration_dir(&doc, 1);
    let ran = std::fs::read_to_string(it.join("output/ran")).unwrap_or_default();
    assert_eq!(ran.trim(), format!("proxy={proxy}"));
    let record = read_json(&it.join("result.json"));
    assert_eq!(
        record["network"]["mode"], "platform",
        "{:#}",
        record["network"]
    );
    assert_eq!(
        record["network"]["platform"], "openshell",
        "{:#}",
        record["network"]
    );
}

/// A name other than `localhost` that this machine's `/etc/hosts` gives a loopback address.
fn loopback_name() -> Option<String> {
    let hosts = std::fs::read_to_string("/etc/hosts").ok()?;
    hosts.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        let addr = words.next()?;
        if !addr.starts_with("127.") {
            return None;
        }
        words
            .take_while(|w| !w.starts_with('#'))
            .find(|w| *w != "localhost" && !w.contains("localhost"))
            .map(str::to_string)
    })
}

#[test]
fn attack_egress__an_allowed_name_that_resolves_to_loopback_is_refused_by_the_host() {
    loopback_behind_a_name(probe, "");
}

#[test]
fn attack_egress__in_a_networked_sandbox_an_allowed_name_resolving_to_loopback_is_refused() {
    loopback_behind_a_name(probe_networked, "");
}

#[test]
fn attack_egress__from_sandbox_an_allowed_name_resolving_to_loopback_is_refused_by_the_supervisor()
{
    loopback_behind_a_name(probe_networked, "  from: sandbox\n");
}

/// An allowed name that resolves to a loopback address is refused by whoever dials it, the
/// refusal named in the proxy's answer and the record (`run`: [`probe`] or
/// [`probe_networked`]; `from`: more of the `network:` mapping, `from: sandbox` or nothing).
fn loopback_behind_a_name(run: fn(&str, &str) -> Option<(Value, Value)>, from: &str) {
    let name = loopback_name();
    if !pitcrew_e2e::prerequisite(
        name.is_some(),
        "needs a name other than localhost that /etc/hosts maps to a 127.x address",
    ) {
        return;
    }
    let name = name.unwrap_or_default();
    let port = echo_server();
    let network = format!("network:\n  allow: [\"{name}:{port}\"]\n{from}");
    let cases = format!("res['via_name'] = proxy('{name}', {port})\n");
    let Some((probe, record)) = run(&network, &cases) else {
        return;
    };
    let dialler = (!from.is_empty()).then_some("sandbox");
    assert_eq!(
        record["network"]["connections"][0]["from"].as_str(),
        dialler
    );
    assert_eq!(probe["via_name"][0], "502", "{probe:#}");
    let body = probe["via_name"][1].as_str().unwrap_or_default();
    assert!(body.contains("a loopback address"), "{body}");
    let conns = connections(&record);
    assert_eq!(conns.len(), 1, "{conns:#?}");
    assert_eq!(conns[0]["allowed"], false);
    assert!(conns[0]["reason"]
        .as_str()
        .unwrap_or_default()
        .contains("list that address itself"));
}

/// `allow … from: sandbox` in a networked sandbox: the supervisor dials the allowed
/// connections itself, from the sandbox's namespace (here this machine's), and relays them
/// between the agent's own namespace and the endpoint; each is recorded with `from: sandbox`,
/// the refused ones too.
#[test]
fn allow_from_sandbox_in_a_networked_sandbox_is_dialled_by_the_supervisor() {
    let mirrored = echo_server();
    let named = echo_server();
    let network = format!(
        "network:\n  allow: [\"127.0.0.1:{mirrored}\", \"localhost:{named}\"]\n  from: sandbox\n"
    );
    let cases = format!(
        "res['mirror'] = echo_via(('127.0.0.1', {mirrored}), b'hello mirror')\n\
         res['proxy'] = proxy('localhost', {named}, b'x' * 300000)\n\
         res['refused'] = proxy('example.com', 443)\n"
    );
    let Some((probe, record)) = probe_networked(&network, &cases) else {
        return;
    };
    assert_eq!(probe["mirror"], "hello mirror", "{probe:#}");
    assert_eq!(probe["proxy"][0], "200", "{probe:#}");
    assert_eq!(
        probe["proxy"][1].as_str().map(str::len),
        Some(300_000),
        "more than a window each way"
    );
    assert_eq!(probe["refused"][0], "403", "{probe:#}");
    let network = &record["network"];
    assert_eq!(network["from"], "sandbox", "{network:#}");
    assert_eq!(network["namespace"], "agent", "{network:#}");
    let conns = connections(&record);
    assert_eq!(conns.len(), 3, "{conns:#?}");
    // Dialled by the supervisor; the third was refused by the policy before any dial.
    assert!(
        conns[..2].iter().all(|c| c["from"] == "sandbox"),
        "{conns:#?}"
    );
    assert_eq!(conns[0]["allowed"], true, "{conns:#?}");
    assert_eq!(conns[0]["bytes_down"], 12, "{conns:#?}");
    assert_eq!(conns[1]["allowed"], true, "{conns:#?}");
    assert_eq!(conns[1]["bytes_up"], 300_000, "{conns:#?}");
    assert_eq!(conns[2]["allowed"], false, "{conns:#?}");
}

/// `allow … from: sandbox` in a sandbox without a network (the local engine's own namespace):
/// the supervisor dials from there, where this machine's loopback servers are not, so the
/// allowed endpoint is refused, named in the record; and the agent still runs in a namespace of
/// its own (the supervisor never dials one of its own listeners).
#[test]
fn attack_egress__from_sandbox_dials_from_the_sandboxs_namespace_not_the_hosts() {
    let port = echo_server();
    let network = format!("network:\n  allow: [\"127.0.0.1:{port}\"]\n  from: sandbox\n");
    let cases = format!(
        "try:\n    res['mirror'] = echo_via(('127.0.0.1', {port}), b'x')\n\
         except OSError as e:\n    res['mirror'] = errno.errorcode.get(e.errno, str(e))\n"
    );
    let Some((probe, record)) = probe(&network, &cases) else {
        return;
    };
    assert_ne!(probe["mirror"], "x", "{probe:#}");
    assert_eq!(record["network"]["namespace"], "agent", "{record:#}");
    let conns = connections(&record);
    assert_eq!(conns.len(), 1, "{conns:#?}");
    assert_eq!(conns[0]["allowed"], false, "{conns:#?}");
    assert_eq!(conns[0]["from"], "sandbox", "{conns:#?}");
    let reason = conns[0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!("dialling 127.0.0.1:{port} failed")),
        "{reason}"
    );
}

/// A server on the host's 127.0.0.1 that reads what arrives once and closes: a TLS client
/// through the proxy ends there. Returns its port.
fn closing_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buf = [0u8; 16 * 1024];
            let _ = stream.read(&mut buf);
        }
    });
    port
}

#[test]
fn attack_egress__a_connect_to_an_allowed_name_carrying_tls_for_another_name_is_cut() {
    tls_for_another_name(probe, "");
}

#[test]
fn attack_egress__from_sandbox_a_connect_carrying_tls_for_another_name_is_cut() {
    tls_for_another_name(probe_networked, "  from: sandbox\n");
}

/// A `CONNECT` to an allowed name whose TLS ClientHello names another server is cut before
/// its first byte leaves, whoever dials (`run`, `from` as for [`loopback_behind_a_name`]).
fn tls_for_another_name(run: fn(&str, &str) -> Option<(Value, Value)>, from: &str) {
    let port = closing_server();
    let network = format!("network:\n  allow: [\"localhost:{port}\"]\n{from}");
    // The same CONNECT twice: a ClientHello for the allowed name, then one for another.
    let cases = format!(
        "import ssl\n\
         def hello(name):\n    \
             pport = int(os.environ['HTTPS_PROXY'].rsplit(':', 1)[1])\n    \
             s = socket.create_connection(('127.0.0.1', pport), timeout=20)\n    \
             s.sendall(b'CONNECT localhost:{port} HTTP/1.1\\r\\n\\r\\n')\n    \
             head = b''\n    \
             while b'\\r\\n\\r\\n' not in head:\n        head += s.recv(1)\n    \
             ctx = ssl.create_default_context()\n    \
             ctx.check_hostname = False\n    \
             ctx.verify_mode = ssl.CERT_NONE\n    \
             try:\n        ctx.wrap_socket(s, server_hostname=name)\n        return 'handshake'\n    \
             except (OSError, ssl.SSLError) as e:\n        return 'ended'\n\
         res['same'] = hello('localhost')\n\
         res['other'] = hello('evil.example.com')\n"
    );
    let Some((probe, record)) = run(&network, &cases) else {
        return;
    };
    assert_eq!(probe["same"], "ended", "{probe:#}");
    assert_eq!(probe["other"], "ended", "{probe:#}");
    let conns = connections(&record);
    assert_eq!(conns.len(), 2, "{conns:#?}");
    // The allowed name's ClientHello reached the server, the other one's never left.
    assert_eq!(conns[0]["allowed"], true, "{conns:#?}");
    assert!(conns[0]["bytes_up"].as_u64().unwrap_or(0) > 0, "{conns:#?}");
    assert_eq!(conns[1]["allowed"], false, "{conns:#?}");
    assert_eq!(conns[1]["bytes_up"], 0, "{conns:#?}");
    let reason = conns[1]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("\"evil.example.com\" is not the CONNECT's host localhost"),
        "{reason}"
    );
}

#[test]
fn network_open_is_said_on_stderr_in_the_record_and_in_the_summary() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = LocalFixture::new("true\n", 1, "network: open\n", false);
    let (out, doc) = pitcrew_e2e::pitcrew_run_output(&fx.harness, &fx.state, &[], &[]);
    assert!(out.status.success(), "{doc:#}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("network: open:"), "{stderr}");
    let record = read_json(&iteration_dir(&doc, 1).join("result.json"));
    assert_eq!(record["network"]["mode"], "open", "{record:#}");
    let table = fx.output(&["run", fx.harness.to_str().expect("utf-8")]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("OPEN"), "{text}");
}

/// A listener on the host's 127.0.0.1 whose accept queue is full: a connection to it waits in
/// `connect` (its SYNs dropped) until `release` is told, then gets `STALE` written to it.
/// Returns its port, the sender that releases it, and the receiver told once it wrote.
fn held_server() -> (
    u16,
    std::sync::mpsc::Sender<()>,
    std::sync::mpsc::Receiver<()>,
) {
    use std::os::fd::AsRawFd;
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    // SAFETY: listen on a descriptor the listener owns changes its backlog and nothing else.
    assert_eq!(unsafe { libc::listen(listener.as_raw_fd(), 0) }, 0);
    // With a backlog of 0 one connection fills the queue; the next one's SYNs are dropped.
    let filler = TcpStream::connect(("127.0.0.1", port)).expect("filler");
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (wrote, written) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let _ = released.recv();
        drop(listener.accept()); // the filler
        drop(filler);
        // The host's dial, once its SYN is retried; none within the dial's own timeout: go on.
        let _ = listener.set_nonblocking(true);
        for _ in 0..150 {
            if let Ok((mut stream, _)) = listener.accept() {
                let _ = stream.write_all(b"STALE");
                let _ = wrote.send(());
                std::thread::sleep(std::time::Duration::from_secs(2));
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = wrote.send(());
    });
    (port, release, written)
}

#[test]
fn attack_egress__a_connection_dialled_as_the_iteration_ends_is_not_carried_into_the_next() {
    if !require_pid_namespaces() {
        return;
    }
    let (held, release, written) = held_server();
    // The second iteration's server: once its connection arrives, the first iteration's dial
    // is let through; then it answers and closes.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let fresh = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        if let Ok((mut stream, _)) = listener.accept() {
            let _ = release.send(());
            let _ = written.recv();
            let _ = stream.write_all(b"FRESH");
        }
    });
    let network = format!("network:\n  allow: [\"127.0.0.1:{held}\", \"127.0.0.1:{fresh}\"]\n");
    // The first iteration connects to the held server and ends while pitcrew dials it; the
    // second one connects to the other server and reads all it gets.
    let first = format!(
        "import socket, time\n\
         s = socket.create_connection(('127.0.0.1', {held}), timeout=20)\n\
         time.sleep(1)\n"
    );
    let second = format!(
        "import socket\n\
         s = socket.create_connection(('127.0.0.1', {fresh}), timeout=30)\n\
         s.shutdown(socket.SHUT_WR)\n\
         out = b''\n\
         while True:\n    \
             d = s.recv(65536)\n    \
             if not d: break\n    \
             out += d\n\
         open('output/got', 'wb').write(out)\n"
    );
    let script = format!(
        "mkdir -p output\nif [ -e .first-done ]; then\npython3 - <<'PROBE'\n{second}PROBE\n\
         else\ntouch .first-done\npython3 - <<'PROBE'\n{first}PROBE\nfi\n"
    );
    let fx = LocalFixture::new(&script, 2, &format!("keep_output: true\n{network}"), false);
    let (code, doc) = pitcrew_run_status(&fx.harness, &fx.state, &[], &[]);
    assert_eq!(code, Some(0), "{doc:#}");
    let first_record = read_json(&iteration_dir(&doc, 1).join("result.json"));
    let conns = connections(&first_record);
    assert_eq!(conns.len(), 1, "{conns:#?}");
    assert_eq!(conns[0]["allowed"], false, "{conns:#?}");
    let got = std::fs::read_to_string(iteration_dir(&doc, 2).join("output/got")).expect("got");
    // The first iteration's connection, dialled after it ended, never reaches the second's.
    assert_eq!(got, "FRESH", "{doc:#}");
}

#[test]
fn attack_egress__refused_attempts_cannot_push_a_carried_connection_out_of_the_record() {
    let port = echo_server();
    let network = format!("network:\n  allow: [\"127.0.0.1:{port}\"]\n");
    // More refused attempts than the record lists, then the connection that carries bytes.
    let cases = format!(
        "res['refused'] = sum(1 for i in range(1001) if proxy('example.com', 443)[0] == '403')\n\
         res['carried'] = echo_via(('127.0.0.1', {port}), b'the payload')\n"
    );
    let Some((probe, record)) = probe(&network, &cases) else {
        return;
    };
    assert_eq!(probe["refused"], 1001, "{probe:#}");
    assert_eq!(probe["carried"], "the payload", "{probe:#}");
    let conns = connections(&record);
    let carried: Vec<&Value> = conns.iter().filter(|c| c["allowed"] == true).collect();
    assert_eq!(carried.len(), 1, "{:#}", record["network"]["dropped"]);
    assert_eq!(carried[0]["port"], u64::from(port));
    assert_eq!(carried[0]["bytes_up"], 11);
    assert_eq!(carried[0]["bytes_down"], 11);
    assert!(
        record["network"]["dropped"].as_u64().unwrap_or(0) >= 1,
        "{:#}",
        record["network"]
    );
}

/// A Unix socket file of the host is no way out of a sandbox with a network namespace of its
/// own: the local engine hides `/run` (where the host keeps its services' sockets: D-Bus,
/// `nscd`, systemd-resolved, databases) behind an empty tmpfs, and the record says so. A
/// world-writable listener of the host's in `/run`: the agent's connect finds no file there,
/// the listener never sees it; under `open` (the host's network, the host's `/run`) it does.
#[test]
fn attack_egress__a_host_unix_socket_under_run_is_out_of_reach() {
    use std::os::unix::fs::PermissionsExt as _;
    use std::os::unix::net::UnixListener;
    let path = format!("/run/pitcrew-egress-test-{}.sock", std::process::id());
    let _ = std::fs::remove_file(&path);
    let listener = match UnixListener::bind(&path) {
        Ok(listener) => listener,
        Err(err) => panic!("cannot bind {path}: {err}"),
    };
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let cases = format!(
        "def unix():\n    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n    s.connect('{path}')\n    s.sendall(b'x')\nres['unix'] = err(unix)\nres['run'] = sorted(os.listdir('/run'))\n"
    );
    let hidden = probe("network: none\n", &cases);
    let seen = listener.accept().is_ok();
    let open = probe("network: open\n", &cases);
    let seen_open = listener.accept().is_ok();
    let _ = std::fs::remove_file(&path);
    let (Some((probe_none, record)), Some((probe_open, record_open))) = (hidden, open) else {
        return;
    };
    assert_eq!(probe_none["unix"], "ENOENT", "{probe_none:#}");
    assert_eq!(probe_none["run"], serde_json::json!([]), "{probe_none:#}");
    assert!(!seen, "the host's listener saw the agent's connection");
    let hidden = record["network"]["hidden"].as_array().cloned();
    assert!(
        hidden.unwrap_or_default().contains(&"/run".into()),
        "{record:#}"
    );
    assert_eq!(probe_open["unix"], "ok", "{probe_open:#}");
    assert!(seen_open, "under open the host's /run is the sandbox's");
    assert!(
        record_open["network"].get("hidden").is_none(),
        "{record_open:#}"
    );
}

/// In a networked sandbox (the local engine's, started for `open`, reused under `none`), the
/// agent gets a network namespace of its own, but the host's `/run` stays the sandbox's: a
/// world-writable listener of the host's there (where D-Bus, systemd-resolved's varlink socket,
/// `nscd`, a database keep theirs) is reached by the agent, and the record names nothing
/// hidden. Under `none` and `allow` the agent must not reach it, as in a sandbox started for
/// them ([`attack_egress__a_host_unix_socket_under_run_is_out_of_reach`]).
#[test]
fn attack_egress__in_a_reused_open_sandbox_a_host_unix_socket_under_run_is_out_of_reach() {
    use std::os::unix::fs::PermissionsExt as _;
    use std::os::unix::net::UnixListener;
    let path = format!("/run/pitcrew-egress-reused-{}.sock", std::process::id());
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap_or_else(|e| panic!("bind {path}: {e}"));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let cases = format!(
        "def unix():\n    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n    s.connect('{path}')\n    s.sendall(b'x')\nres['unix'] = err(unix)\n"
    );
    let ran = probe_networked("network: none\n", &cases);
    let seen = listener.accept().is_ok();
    let _ = std::fs::remove_file(&path);
    let Some((probe, record)) = ran else {
        return;
    };
    assert_eq!(record["network"]["namespace"], "agent", "{record:#}");
    assert!(
        !seen && probe["unix"] == "ENOENT",
        "the agent under `none` reached the host's socket {path}: {probe:#}\n{:#}",
        record["network"]
    );
}

/// `pitcrew run` of a `network: allow` harness whose agent runs `script`, in a podman container
/// started with `run_args` and podman's default capabilities, which leave out `CAP_SYS_ADMIN`
/// (the supervisor is root there): its exit code and the iteration's record. `None` when
/// podman is missing. The iteration's directory and the temporary directory holding it.
fn in_a_root_container_without_cap_sys_admin(
    run_args: &[&str],
    script: &str,
) -> Option<(Option<i32>, Value, std::path::PathBuf, tempfile::TempDir)> {
    use pitcrew_e2e::container::{containers_conf, podman_usable, Container};
    if !pitcrew_e2e::prerequisite(
        podman_usable(),
        "needs root, podman and busybox-static (.ci/run installs them)",
    ) {
        return None;
    }
    let container = Container::start(run_args);
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let harness = pitcrew_e2e::write_command_harness(
        root,
        script,
        1,
        "60s",
        false,
        "keep_output: true\nnetwork:\n  allow: [\"example.com:443\"]\n",
    );
    let (code, doc) = pitcrew_run_status(
        &harness,
        root,
        &["--engine", "exec", "--sandbox", &container.name],
        &[(
            "CONTAINERS_CONF",
            containers_conf().to_str().expect("utf-8"),
        )],
    );
    let it = iteration_dir(&doc, 1);
    let record = read_json(&it.join("result.json"));
    Some((code, record, it, dir))
}

/// A podman container with a network (podman's default bridge) and podman's default
/// capabilities, which leave out `CAP_SYS_ADMIN`: the root supervisor cannot unshare a network
/// namespace, and makes the agent's inside a user namespace of its own that maps the agent's
/// ids only. The agent sees `lo` alone and no route, keeps its uid, and has no capability
/// (its bounding set, full in the namespace it joined, emptied), `no_new_privs` and seccomp.
#[test]
fn attack_egress__a_root_supervisor_without_cap_sys_admin_confines_the_agent_through_a_user_namespace(
) {
    let script = "mkdir -p output\n\
                  grep -E '^(Cap(Inh|Prm|Eff|Amb|Bnd)|NoNewPrivs|Seccomp):' /proc/self/status > output/status\n\
                  tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' > output/dev\n\
                  tail -n +2 /proc/net/route | wc -l > output/routes\n\
                  cat /proc/self/uid_map > output/uid_map\n\
                  id -u > output/uid\n";
    let Some((code, record, it, _dir)) =
        in_a_root_container_without_cap_sys_admin(&["--network=podman"], script)
    else {
        return;
    };
    assert_eq!(code, Some(0), "{record:#}");
    let network = &record["network"];
    assert_eq!(network["namespace"], "agent", "{record:#}");
    assert_eq!(network["namespace_via"], "user-namespace", "{record:#}");
    let read = |name: &str| {
        std::fs::read_to_string(it.join("output").join(name))
            .unwrap_or_else(|e| panic!("output/{name}: {e}\n{record:#}"))
    };
    assert_eq!(read("dev").trim(), "lo");
    assert_eq!(read("routes").trim(), "0");
    let uid = record["confinement"]["uid"]
        .as_u64()
        .expect("the agent's uid");
    assert_eq!(read("uid").trim(), uid.to_string());
    let map: Vec<String> = read("uid_map")
        .split_whitespace()
        .map(String::from)
        .collect();
    assert_eq!(map, [uid.to_string(), uid.to_string(), "1".to_string()]);
    let status = read("status");
    for line in ["CapInh", "CapPrm", "CapEff", "CapAmb", "CapBnd"] {
        assert!(
            status.contains(&format!("{line}:\t0000000000000000")),
            "{line}: {status}"
        );
    }
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    assert!(status.contains("Seccomp:\t2"), "{status}");
    assert_eq!(record["confinement"]["caps_cleared"], true, "{record:#}");
}

/// The same container where a seccomp profile refuses `unshare` (as docker's default does
/// without `CAP_SYS_ADMIN`): neither namespace can be made, so `network: allow` is refused
/// before launch (125), both errnos and the way out named in the record; the agent never runs.
#[test]
fn attack_egress__a_podman_container_with_a_network_and_no_namespace_to_make_refuses_allow() {
    let profile_dir = tempfile::tempdir().expect("tempdir");
    let profile = profile_dir.path().join("seccomp.json");
    let text = std::fs::read_to_string("/usr/share/containers/seccomp.json").unwrap_or_default();
    let Ok(mut seccomp) = serde_json::from_str::<Value>(&text) else {
        assert!(
            !pitcrew_e2e::e2e_required(),
            "podman's default seccomp profile is missing"
        );
        return;
    };
    for rule in seccomp["syscalls"].as_array_mut().expect("syscalls") {
        if let Some(names) = rule["names"].as_array_mut() {
            names.retain(|n| n != "unshare");
        }
    }
    seccomp["syscalls"]
        .as_array_mut()
        .expect("syscalls")
        .push(serde_json::json!({"names": ["unshare"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}));
    std::fs::write(&profile, seccomp.to_string()).expect("write the profile");
    let opt = format!("seccomp={}", profile.display());
    let script = "mkdir -p output && echo ran > output/ran\n";
    let Some((code, record, it, _dir)) = in_a_root_container_without_cap_sys_admin(
        &["--network=podman", "--security-opt", &opt],
        script,
    ) else {
        return;
    };
    assert_eq!(code, Some(125), "{record:#}");
    assert_eq!(record["exit_code"], 125, "{record:#}");
    let reason = record["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("interfaces besides lo"), "{reason}");
    assert!(
        reason.contains("unshare(CLONE_NEWNET): EPERM")
            && reason.contains("CAP_SYS_ADMIN")
            && reason.contains("unshare(CLONE_NEWUSER|CLONE_NEWNET): EPERM"),
        "{reason}"
    );
    assert!(reason.contains("network: open"), "{reason}");
    assert!(!it.join("output/ran").exists());
}
