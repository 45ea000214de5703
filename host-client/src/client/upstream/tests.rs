use super::*;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use std::net::TcpListener;

/// A CA (its PEM) and a certificate for `localhost` it signed, with its key.
pub(crate) fn test_ca() -> (String, CertificateDer<'static>, PrivateKeyDer<'static>) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    (ca_cert.pem(), cert.der().clone(), key)
}

/// A TLS server on 127.0.0.1 that reads two request heads on one connection and answers each
/// with its head as the body, the second answer in two writes; returns its port.
pub(crate) fn echo_server(cert: CertificateDer<'static>, key: PrivateKeyDer<'static>) -> u16 {
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let Ok((tcp, _)) = listener.accept() else {
            return;
        };
        let conn = ServerConnection::new(config).unwrap();
        let mut tls = StreamOwned::new(conn, tcp);
        let mut got = Vec::new();
        for n in 0..2 {
            let head = loop {
                if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                    break got.drain(..end + 4).collect::<Vec<u8>>();
                }
                let mut buf = [0u8; 1024];
                match tls.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(k) => got.extend_from_slice(&buf[..k]),
                }
            };
            let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", head.len());
            tls.write_all(answer.as_bytes()).unwrap();
            if n == 1 {
                let (a, b) = head.split_at(head.len() / 2);
                tls.write_all(a).unwrap();
                tls.flush().unwrap();
                tls.write_all(b).unwrap();
            } else {
                tls.write_all(&head).unwrap();
            }
            tls.flush().unwrap();
        }
        tls.conn.send_close_notify();
        let _ = tls.flush();
    });
    port
}

fn read_to_end(up: &mut Upstream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 7];
    loop {
        match up.read(&mut buf) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn a_tls_upstream_trusts_the_cert_file_and_carries_requests_both_ways() {
    let (ca, cert, key) = test_ca();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca).unwrap();
    let port = echo_server(cert, key);
    let config = make_tls_config(Some(ca_file.into_os_string())).unwrap();
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut up = tls_with(tcp, "localhost", Duration::from_secs(10), config).unwrap();
    let mut reader = up.try_clone().unwrap();
    up.write_all(b"GET /a HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    up.write_all(b"GET /b HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let got = String::from_utf8(read_to_end(&mut reader)).unwrap();
    assert_eq!(got.matches("HTTP/1.1 200 OK").count(), 2, "{got}");
    assert!(
        got.contains("GET /a HTTP/1.1") && got.contains("GET /b HTTP/1.1"),
        "{got}"
    );
}

#[test]
fn a_server_the_roots_do_not_vouch_for_is_refused_at_the_handshake() {
    let (_, cert, key) = test_ca();
    let port = echo_server(cert, key);
    let config = make_tls_config(None).unwrap();
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let err = tls_with(tcp, "localhost", Duration::from_secs(10), config)
        .err()
        .expect("an unknown issuer is refused");
    assert!(err.contains("handshake"), "{err}");
}

#[test]
fn a_cert_file_without_certificates_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "nothing here\n").unwrap();
    let err = make_tls_config(Some(empty.clone().into_os_string()))
        .err()
        .unwrap();
    assert!(
        err.contains("SSL_CERT_FILE") && err.contains("empty.pem"),
        "{err}"
    );
    let missing = make_tls_config(Some(dir.path().join("none.pem").into_os_string()))
        .err()
        .unwrap();
    assert!(missing.contains("none.pem"), "{missing}");
}
