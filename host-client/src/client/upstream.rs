//! The host's end of a carried connection: a plain TCP stream, or for a model connection to an
//! `https://` base URL a TLS session over one (rustls with ring; the roots are
//! `SSL_CERT_FILE`'s certificates when it is set, else the Mozilla roots of `webpki-roots`).
//!
//! One thread reads and one writes the same connection; a TLS session is shared between them
//! under a lock held only while it turns bytes over, never while the reader waits for the
//! network.

use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

/// The host's end of one connection.
pub enum Upstream {
    /// Bytes as they are.
    Plain(TcpStream),
    /// A TLS session over `tcp`.
    Tls {
        /// The session, shared by the reading and the writing thread.
        session: Arc<Mutex<ClientConnection>>,
        /// The socket under it.
        tcp: TcpStream,
    },
}

impl Upstream {
    /// Another handle on the same connection (for the other thread).
    pub fn try_clone(&self) -> io::Result<Upstream> {
        Ok(match self {
            Upstream::Plain(s) => Upstream::Plain(s.try_clone()?),
            Upstream::Tls { session, tcp } => Upstream::Tls {
                session: Arc::clone(session),
                tcp: tcp.try_clone()?,
            },
        })
    }

    /// The socket, to shut it.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Upstream::Plain(s) | Upstream::Tls { tcp: s, .. } => s,
        }
    }

    /// Writes all of `bytes`.
    pub fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Upstream::Plain(s) => s.write_all(bytes),
            Upstream::Tls { session, tcp } => {
                let mut session = session.lock().unwrap_or_else(PoisonError::into_inner);
                let mut rest = bytes;
                while !rest.is_empty() {
                    let n = session.writer().write(rest)?;
                    rest = &rest[n..];
                    let mut flushed = false;
                    while session.wants_write() {
                        session.write_tls(tcp)?;
                        flushed = true;
                    }
                    if n == 0 && !flushed {
                        return Err(io::Error::new(
                            io::ErrorKind::WriteZero,
                            "the TLS session takes no more bytes",
                        ));
                    }
                }
                Ok(())
            }
        }
    }

    /// Reads what the endpoint sent; `Ok(0)` at its end.
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (session, tcp) = match self {
            Upstream::Plain(s) => return s.read(buf),
            Upstream::Tls { session, tcp } => (session, tcp),
        };
        let mut wire = vec![0u8; 16 * 1024];
        loop {
            {
                let mut s = session.lock().unwrap_or_else(PoisonError::into_inner);
                match s.reader().read(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            let n = match tcp.read(&mut wire) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            // A server that closes without close_notify ends the stream all the same (HTTP
            // frames its own messages).
            if n == 0 {
                return Ok(0);
            }
            let mut s = session.lock().unwrap_or_else(PoisonError::into_inner);
            let mut fed = &wire[..n];
            while !fed.is_empty() {
                s.read_tls(&mut fed)?;
                s.process_new_packets()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            }
            while s.wants_write() {
                s.write_tls(tcp)?;
            }
        }
    }

    /// Says the agent finished writing.
    pub fn shutdown_write(&mut self) {
        if let Upstream::Tls { session, tcp } = self {
            let mut s = session.lock().unwrap_or_else(PoisonError::into_inner);
            s.send_close_notify();
            while s.wants_write() {
                if s.write_tls(tcp).is_err() {
                    break;
                }
            }
        }
        let _ = self.tcp().shutdown(Shutdown::Write);
    }
}

/// The TLS configuration of model connections, made once.
fn tls_config() -> Result<Arc<ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| make_tls_config(std::env::var_os("SSL_CERT_FILE")))
        .clone()
}

/// The TLS configuration with the certificates of `cert_file` (PEM) as its roots, or the
/// Mozilla roots without one.
fn make_tls_config(cert_file: Option<std::ffi::OsString>) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    match cert_file {
        Some(path) => {
            let shown = std::path::Path::new(&path).display().to_string();
            let certs = CertificateDer::pem_file_iter(&path)
                .map_err(|e| format!("SSL_CERT_FILE {shown}: {e}"))?;
            for cert in certs {
                let cert = cert.map_err(|e| format!("SSL_CERT_FILE {shown}: {e}"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("SSL_CERT_FILE {shown}: {e}"))?;
            }
            if roots.is_empty() {
                return Err(format!("SSL_CERT_FILE {shown}: no certificate in it"));
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    // ring builds with a C compiler alone (aws-lc-rs needs cmake); it offers no post-quantum
    // key exchange, which its deprecation note is about.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // The requests are read as HTTP/1.1: the server must not choose another.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A TLS session with `host` over `tcp`, its handshake done within `timeout`.
pub fn tls(tcp: TcpStream, host: &str, timeout: Duration) -> Result<Upstream, String> {
    tls_with(tcp, host, timeout, tls_config()?)
}

/// [`tls`] with `config`.
fn tls_with(
    tcp: TcpStream,
    host: &str,
    timeout: Duration,
    config: Arc<ClientConfig>,
) -> Result<Upstream, String> {
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| format!("TLS: {host:?} is no server name: {e}"))?;
    let mut session =
        ClientConnection::new(config, name).map_err(|e| format!("TLS with {host}: {e}"))?;
    let mut sock = tcp;
    let _ = sock.set_read_timeout(Some(timeout));
    let _ = sock.set_write_timeout(Some(timeout));
    while session.is_handshaking() {
        session
            .complete_io(&mut sock)
            .map_err(|e| format!("TLS handshake with {host}: {e}"))?;
    }
    let _ = sock.set_read_timeout(None);
    let _ = sock.set_write_timeout(None);
    Ok(Upstream::Tls {
        session: Arc::new(Mutex::new(session)),
        tcp: sock,
    })
}

#[cfg(test)]
pub(crate) mod tests;
