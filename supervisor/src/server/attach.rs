//! `pitcrew-init attach`: bridges stdin/stdout to the control socket, so the host reaches a
//! sandbox through any exec-style CLI (`podman exec -i {sandbox} pitcrew-init attach`,
//! `kubectl exec -i …`). Bytes are copied both ways unchanged; the process ends when the
//! supervisor closes the connection. This is a plain client process, not PID 1: it may use a
//! thread for the stdin direction.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::Path;

/// Connects to `socket` and copies bytes both ways until the supervisor closes the
/// connection. Errors name the socket.
pub fn attach(socket: &Path) -> Result<(), String> {
    let stream = UnixStream::connect(socket).map_err(|e| {
        format!(
            "cannot connect to the control socket {}: {e}",
            socket.display()
        )
    })?;
    let mut to_socket = stream
        .try_clone()
        .map_err(|e| format!("{}: {e}", socket.display()))?;
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to_socket.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to_socket.shutdown(Shutdown::Write);
    });
    let mut from_socket = stream;
    let mut stdout = std::io::stdout().lock();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from_socket.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                if stdout
                    .write_all(&buf[..n])
                    .and_then(|()| stdout.flush())
                    .is_err()
                {
                    // The host stopped reading: nothing left to bridge.
                    return Ok(());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("{}: {e}", socket.display())),
        }
    }
}
