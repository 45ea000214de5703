//! Helpers of the `server_*` tests: the real `pitcrew-init serve` as PID 1 of a fresh PID
//! namespace, and a client speaking the protocol over the control socket.

use super::{bin, busy_wait, pid1_of};
use pitcrew_core::protocol::{read_frame, Channel, Frame, FrameKind};
use serde_json::{json, Value};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Generous bound for anything the server does.
pub const WAIT: Duration = Duration::from_secs(60);

/// A running `pitcrew-init serve`.
pub struct Server {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub records: PathBuf,
}

impl Server {
    /// Starts the server with default limits.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Starts the server with extra `serve` arguments; waits until the socket exists.
    pub fn start_with(extra: &[&str]) -> Server {
        Server::start_with_env(extra, &[])
    }

    /// Starts the server with extra `serve` arguments and environment variables (the image's
    /// environment); waits until the socket exists.
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let socket = dir.path().join("run/control.sock");
        let records = dir.path().join("records");
        let child = Command::new("unshare")
            .args([
                "--pid",
                "--fork",
                "--mount-proc",
                bin(),
                "serve",
                "--socket",
            ])
            .arg(&socket)
            .arg("--records")
            .arg(&records)
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn unshare");
        let server = Server {
            child,
            dir,
            socket,
            records,
        };
        assert!(
            busy_wait(|| server.socket.exists(), WAIT),
            "the control socket never appeared"
        );
        server
    }

    /// A path in the test directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A connected client (not yet said hello).
    pub fn connect_raw(&self) -> Client {
        let stream = UnixStream::connect(&self.socket).expect("connect");
        stream.set_read_timeout(Some(WAIT)).expect("timeout");
        Client { stream, next: 1 }
    }

    /// A connected client after a successful hello.
    pub fn connect(&self) -> Client {
        let mut c = self.connect_raw();
        let r = c.request(json!({"type": "hello", "versions": [1], "client": "test"}));
        assert_eq!(r["type"], "hello", "{r}");
        c
    }

    /// Waits for the server (unshare) to exit; its code.
    pub fn wait_exit(&mut self) -> Option<i32> {
        let mut code = None;
        busy_wait(
            || match self.child.try_wait() {
                Ok(Some(status)) => {
                    code = status.code();
                    true
                }
                _ => false,
            },
            WAIT,
        );
        code
    }

    /// Waits until `status` says idle with at least `iteration` iterations done.
    pub fn wait_idle(&self, iteration: u64) {
        let ok = busy_wait(
            || {
                let mut c = self.connect();
                let s = c.request(json!({"type": "status"}));
                s["status"]["state"] == "idle"
                    && s["status"]["iteration"].as_u64() >= Some(iteration)
            },
            WAIT,
        );
        assert!(
            ok,
            "the server never became idle after iteration {iteration}"
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(pid) = pid1_of(self.child.id()) {
            // SIGKILL to PID 1 of the namespace ends every process in it.
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A protocol client on a blocking stream.
pub struct Client {
    pub stream: UnixStream,
    next: u64,
}

impl Client {
    /// Sends raw bytes.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// Sends a control message (an `id` is added when missing); returns the id.
    pub fn send(&mut self, mut message: Value) -> u64 {
        if message.get("id").is_none() {
            message["id"] = json!(self.next);
            self.next += 1;
        }
        let id = message["id"].as_u64().unwrap_or(0);
        self.send_raw(&Frame::control(&message).encode());
        id
    }

    /// Sends a data frame.
    pub fn send_data(&mut self, channel: Channel, bytes: &[u8]) {
        self.send_raw(&Frame::data(channel, bytes.to_vec()).encode());
    }

    /// The next frame, `None` at end of stream.
    pub fn recv(&mut self) -> Option<Frame> {
        read_frame(&mut self.stream).expect("read frame")
    }

    /// The next control message (data frames are skipped).
    pub fn recv_control(&mut self) -> Value {
        loop {
            let frame = self.recv().expect("a frame, not the end of the stream");
            if frame.kind == FrameKind::Control {
                return serde_json::from_slice(&frame.payload).expect("json");
            }
        }
    }

    /// Sends a request and returns the next control message.
    pub fn request(&mut self, message: Value) -> Value {
        self.send(message);
        self.recv_control()
    }

    /// Sends `upload` and the tar bytes; returns the response.
    pub fn upload(&mut self, dest: &Path, owner: Option<(u32, u32)>, tar: &[u8]) -> Value {
        let mut msg = json!({"type": "upload", "dest": dest});
        if let Some((uid, gid)) = owner {
            msg["owner"] = json!({"uid": uid, "gid": gid});
        }
        self.send(msg);
        for chunk in tar.chunks(100_000) {
            self.send_data(Channel::Tar, chunk);
        }
        self.send_data(Channel::Tar, &[]);
        self.recv_control()
    }

    /// `upload` with `offer`: sends `listing`, then (when the answer is `need`) the tar stream
    /// `tar_for` makes of the need bitmap; returns the answer to the listing and the final one
    /// (`Null` when the listing was refused).
    pub fn upload_offered(
        &mut self,
        dest: &Path,
        owner: Option<(u32, u32)>,
        listing: &[u8],
        tar_for: impl FnOnce(&[u8]) -> Vec<u8>,
    ) -> (Value, Value) {
        let mut msg = json!({"type": "upload", "dest": dest, "offer": true});
        if let Some((uid, gid)) = owner {
            msg["owner"] = json!({"uid": uid, "gid": gid});
        }
        self.send(msg);
        for chunk in listing.chunks(100_000) {
            self.send_data(Channel::Listing, chunk);
        }
        self.send_data(Channel::Listing, &[]);
        let need = self.recv_control();
        if need["type"] != "need" {
            return (need, Value::Null);
        }
        let bitmap = hex::decode(need["need"].as_str().expect("need bitmap")).expect("hex");
        let tar = tar_for(&bitmap);
        for chunk in tar.chunks(100_000) {
            self.send_data(Channel::Tar, chunk);
        }
        self.send_data(Channel::Tar, &[]);
        let done = self.recv_control();
        (need, done)
    }

    /// `collect`: the tar bytes and the final response.
    pub fn collect(&mut self, iteration: u32) -> (Vec<u8>, Value) {
        self.send(json!({"type": "collect", "iteration": iteration}));
        let mut tar = Vec::new();
        loop {
            let frame = self.recv().expect("frame");
            match (frame.kind, frame.channel) {
                (FrameKind::Data, Channel::Tar) if frame.payload.is_empty() => break,
                (FrameKind::Data, Channel::Tar) => tar.extend_from_slice(&frame.payload),
                (FrameKind::Control, _) => {
                    let v: Value = serde_json::from_slice(&frame.payload).expect("json");
                    return (tar, v);
                }
                _ => {}
            }
        }
        (tar, self.recv_control())
    }
}

/// A tar header with a raw path (the builder would refuse `..` or absolute ones).
pub fn raw_header(path: &[u8], kind: tar::EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.as_old_mut().name[..path.len()].copy_from_slice(path);
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(0o644);
    h.set_cksum();
    h
}

/// A tar of (raw path, type, content, link name).
pub fn tar_of(entries: &[(&[u8], tar::EntryType, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, kind, data) in entries {
        let mut h = raw_header(path, *kind, data.len() as u64);
        if matches!(kind, tar::EntryType::Symlink | tar::EntryType::Link) {
            h.set_link_name("/etc/passwd").expect("link name");
            h.set_size(0);
            h.set_cksum();
            b.append(&h, &[][..]).expect("append");
        } else {
            b.append(&h, *data).expect("append");
        }
    }
    b.into_inner().expect("tar")
}

/// Unpacks a collected tar into a map of path → bytes (regular files).
pub fn files_of(tar: &[u8]) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut archive = tar::Archive::new(tar);
    for entry in archive.entries().expect("entries") {
        let mut entry = entry.expect("entry");
        if entry.header().entry_type() == tar::EntryType::Regular {
            let path = entry.path().expect("path").display().to_string();
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut bytes).expect("read");
            out.insert(path, bytes);
        }
    }
    out
}
