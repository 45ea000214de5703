//! The agent's own network namespace made through a user namespace, for a supervisor that
//! cannot `unshare(CLONE_NEWNET)` itself (no `CAP_SYS_ADMIN`: the unprivileged mode, root in a
//! container without it).
//!
//! A multi-threaded process cannot `unshare(CLONE_NEWUSER)`, and joining a network namespace
//! needs `CAP_SYS_ADMIN` in the caller's own user namespace too, so the supervisor can neither
//! make the pair nor enter it. A short-lived helper does: a fresh exec of this binary
//! (`pitcrew-init netns-helper`, hidden; a fresh image holds none of the supervisor's memory
//! and is single-threaded) with one end of a `SOCK_SEQPACKET` socketpair as its stdin. It
//! `unshare(CLONE_NEWUSER | CLONE_NEWNET)`s, denies `setgroups` and maps its own uid and gid
//! only (`X X 1`) when it is not root (a root supervisor writes the agent's ids instead, each
//! to itself, never root's), brings `lo` up (it holds `CAP_NET_ADMIN` in its new user namespace), checks the
//! namespace holds `lo` only, and sends its `/proc/self/ns/user` and `/proc/self/ns/net`
//! descriptors back (`SCM_RIGHTS`). Then it binds each listener the supervisor asks for and
//! sends it back, until the supervisor closes its end.
//!
//! The supervisor checks what it was given before it uses it: the network namespace is not its
//! own, it is owned by the user namespace sent with it, that user namespace's parent is the
//! supervisor's, and every listener lives in that network namespace (`SIOCGSKNS`). The agent
//! joins both before exec ([`super::confine::ConfinePlan::join_network`]): the user namespace
//! first (as its owner's uid in the parent namespace it may), which gives it every capability
//! there and a full bounding set, then the network namespace; the bounding set is emptied and
//! the other sets cleared, and its exec as a non-zero uid with `no_new_privs` leaves it none.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::socket::{
    recvmsg, sendmsg, socketpair, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags,
    SockFlag, SockType,
};

/// The hidden subcommand that runs [`helper_main`].
pub const SUBCOMMAND: &str = "netns-helper";

/// Longest message either side sends (an address, or an error's text).
const MAX_MESSAGE: usize = 1024;

/// How long the supervisor waits for one answer of the helper before giving up on it (a
/// helper that hangs must not hold the iteration forever).
const ANSWER_WAIT: Duration = Duration::from_secs(30);

/// `ioctl` requests of `<linux/nsfs.h>` and `<linux/sockios.h>`.
const NS_GET_USERNS: libc::c_ulong = 0xb701;
const NS_GET_PARENT: libc::c_ulong = 0xb702;
const SIOCGSKNS: libc::c_ulong = 0x894C;

/// The helper's side: run by `pitcrew-init netns-helper` with the socketpair's end as stdin.
/// Returns the process's exit code; every failure is also sent to the supervisor as text.
pub fn helper_main() -> i32 {
    // SAFETY: fd 0 is the socketpair end the supervisor gave as stdin; this owns it from here.
    let sock = unsafe { OwnedFd::from_raw_fd(0) };
    match make_namespaces() {
        Ok((user, net)) => {
            if send(sock.as_fd(), b"R", &[user.as_raw_fd(), net.as_raw_fd()]).is_err() {
                return 1;
            }
        }
        Err(reason) => {
            let _ = send_error(sock.as_fd(), 0, &reason);
            return 1;
        }
    }
    let mut buf = [0u8; MAX_MESSAGE];
    loop {
        let n = match recv(sock.as_fd(), &mut buf, &mut Vec::new()) {
            Ok(0) | Err(_) => return 0,
            Ok(n) => n,
        };
        let request = std::str::from_utf8(&buf[..n]).unwrap_or("");
        let Some(addr) = request
            .strip_prefix('B')
            .and_then(|a| a.parse::<SocketAddr>().ok())
        else {
            let _ = send_error(sock.as_fd(), libc::EINVAL, "not a bind request");
            return 1;
        };
        let sent = match TcpListener::bind(addr) {
            Ok(l) => send(sock.as_fd(), b"L", &[l.as_raw_fd()]),
            Err(err) => send_error(
                sock.as_fd(),
                err.raw_os_error().unwrap_or(libc::EIO),
                &err.to_string(),
            ),
        };
        if sent.is_err() {
            return 1;
        }
    }
}

/// In the helper: the user and network namespace pair, `lo` up and alone; their descriptors.
fn make_namespaces() -> Result<(OwnedFd, OwnedFd), String> {
    // SAFETY: plain id getters.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // SAFETY: unshare takes flags; this process is single-threaded (a fresh exec).
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) } != 0 {
        return Err(super::netns::errno_text(
            "unshare(CLONE_NEWUSER|CLONE_NEWNET)",
        ));
    }
    let write = |name: &str, text: String| {
        std::fs::write(format!("/proc/self/{name}"), text)
            .map_err(|e| format!("writing /proc/self/{name} of the new user namespace: {e}"))
    };
    // A root helper's maps are the supervisor's to write (the agent's ids, which root may
    // map); any other maps its own ids, the only ones it may.
    if uid != 0 {
        write("setgroups", "deny".into())?;
        write("uid_map", format!("{uid} {uid} 1\n"))?;
        write("gid_map", format!("{gid} {gid} 1\n"))?;
    }
    super::netns::bring_up_loopback().map_err(|e| format!("bringing up lo: {e}"))?;
    super::netns::check_loopback_only()?;
    let open = |name: &str| {
        std::fs::File::open(format!("/proc/self/ns/{name}"))
            .map(OwnedFd::from)
            .map_err(|e| format!("/proc/self/ns/{name}: {e}"))
    };
    Ok((open("user")?, open("net")?))
}

/// Sends `data` with `fds` (`SCM_RIGHTS`) as one message.
fn send(sock: BorrowedFd<'_>, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let iov = [IoSlice::new(data)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cmsg };
    sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::empty(), None)?;
    Ok(())
}

/// Sends an error: `E`, the errno (4 bytes, little-endian), the text.
fn send_error(sock: BorrowedFd<'_>, errno: i32, text: &str) -> io::Result<()> {
    let mut msg = vec![b'E'];
    msg.extend_from_slice(&errno.to_le_bytes());
    msg.extend(text.bytes().take(MAX_MESSAGE - 5));
    send(sock, &msg, &[])
}

/// Receives one message into `buf`, its descriptors into `fds`; its length (0 at the end).
fn recv(sock: BorrowedFd<'_>, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<usize> {
    let mut iov = [IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!([RawFd; 2]);
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(raw) = cmsg {
            // SAFETY: SCM_RIGHTS just installed these descriptors in this process; nothing
            // else owns them.
            fds.extend(
                raw.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    if msg.flags.contains(MsgFlags::MSG_CTRUNC) || msg.flags.contains(MsgFlags::MSG_TRUNC) {
        return Err(io::Error::other("a truncated message"));
    }
    Ok(msg.bytes)
}

/// The supervisor's end of a running helper: killed and waited for when dropped early.
#[derive(Debug)]
struct Conn {
    child: Child,
    sock: OwnedFd,
}

impl Conn {
    /// Reads one answer: `Ok` for `expected` (its descriptors into `fds`), else why.
    fn answer(&mut self, expected: u8, fds: &mut Vec<OwnedFd>) -> Result<(), Answer> {
        let mut buf = [0u8; MAX_MESSAGE];
        let n = recv(self.sock.as_fd(), &mut buf, fds)
            .map_err(|e| Answer::Other(format!("the namespace helper: {e}")))?;
        match buf[..n].first() {
            Some(&b) if b == expected => Ok(()),
            Some(b'E') if n >= 5 => {
                let errno = i32::from_le_bytes([buf[1], buf[2], buf[3], buf[4]]);
                let text = String::from_utf8_lossy(&buf[5..n]).into_owned();
                if errno != 0 {
                    Err(Answer::Errno(errno))
                } else {
                    Err(Answer::Other(text))
                }
            }
            None => Err(Answer::Other(match self.child.wait() {
                Ok(status) => format!("the namespace helper ended ({status}) without an answer"),
                Err(err) => format!("the namespace helper ended without an answer ({err})"),
            })),
            Some(_) => Err(Answer::Other(
                "the namespace helper answered out of turn".into(),
            )),
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // The helper has nothing to finish once its work is taken (or given up on): ended
        // here, never waited for unbounded. Our unreaped child, so the pid is still its.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        if let Err(err) = self.child.wait() {
            tracing::warn!("waiting for the namespace helper: {err}");
        }
    }
}

/// The supervisor's side: a running helper, its namespaces received and checked.
#[derive(Debug)]
pub struct Helper {
    conn: Conn,
    user: OwnedFd,
    net: OwnedFd,
}

impl Helper {
    /// Starts the helper and takes its namespaces. `Err` names the step and errno
    /// (`unshare(CLONE_NEWUSER|CLONE_NEWNET): ENOSPC …` where user namespaces are refused).
    /// `agent`: for a root supervisor, the agent's ids, which it maps in the new user
    /// namespace (each to itself, and nothing else: not root); `None` for a non-root one,
    /// whose helper maps its own.
    pub fn start(agent: Option<&AgentIds>) -> Result<Helper, String> {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| format!("a socketpair for the namespace helper: {e}"))?;
        let timeout = nix::sys::time::TimeVal::new(ANSWER_WAIT.as_secs() as _, 0);
        nix::sys::socket::setsockopt(&ours, nix::sys::socket::sockopt::ReceiveTimeout, &timeout)
            .map_err(|e| format!("the namespace helper's socket: {e}"))?;
        let child = Command::new("/proc/self/exe")
            .arg0("pitcrew-init")
            .arg(SUBCOMMAND)
            .env_clear()
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting the namespace helper (/proc/self/exe): {e}"))?;
        let mut conn = Conn { child, sock: ours };
        let mut fds = Vec::new();
        conn.answer(b'R', &mut fds)?;
        let [user, net]: [OwnedFd; 2] = fds
            .try_into()
            .map_err(|_| "the namespace helper sent no namespaces".to_string())?;
        check_pair(user.as_fd(), net.as_fd())?;
        if let Some(agent) = agent {
            write_maps(conn.child.id(), agent)?;
        }
        Ok(Helper { conn, user, net })
    }

    /// Binds a TCP listener at `at` inside the namespace, checked to be there.
    pub fn bind(&mut self, at: SocketAddr) -> io::Result<TcpListener> {
        let request = format!("B{at}");
        send(self.conn.sock.as_fd(), request.as_bytes(), &[])?;
        let mut fds = Vec::new();
        self.conn
            .answer(b'L', &mut fds)
            .map_err(|reason| match reason {
                Answer::Errno(errno) => io::Error::from_raw_os_error(errno),
                Answer::Other(text) => io::Error::other(text),
            })?;
        let fd = fds
            .pop()
            .ok_or_else(|| io::Error::other("the namespace helper sent no listener"))?;
        let inside = socket_netns(fd.as_fd())
            .map_err(|e| io::Error::other(format!("the listener's namespace: {e}")))?;
        if !same_object(inside.as_fd(), self.net.as_fd())? {
            return Err(io::Error::other(
                "the namespace helper sent a listener outside the agent's namespace",
            ));
        }
        let listener = TcpListener::from(fd);
        let local = listener.local_addr()?;
        if local.ip() != at.ip() || (at.port() != 0 && local.port() != at.port()) {
            return Err(io::Error::other(
                "the namespace helper bound another address",
            ));
        }
        Ok(listener)
    }

    /// Ends the helper (its end of the socket closes) and waits for it; the namespaces'
    /// descriptors `(user, net)`.
    pub fn finish(self) -> (OwnedFd, OwnedFd) {
        let Helper { conn, user, net } = self;
        drop(conn);
        (user, net)
    }
}

/// Why the helper did not answer as asked.
#[derive(Debug)]
enum Answer {
    /// The errno it sent.
    Errno(i32),
    /// Its text, or what went wrong with it.
    Other(String),
}

impl From<Answer> for String {
    fn from(answer: Answer) -> String {
        match answer {
            Answer::Errno(errno) => io::Error::from_raw_os_error(errno).to_string(),
            Answer::Other(text) => text,
        }
    }
}

/// The agent's ids, for a root supervisor to map in the user namespace it joins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentIds {
    /// Its uid (never 0: a root agent gets no user namespace).
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
    /// Its supplementary groups.
    pub groups: Vec<u32>,
}

/// Most lines of an id map (the kernel's limit).
const MAX_MAP_LINES: usize = 340;

/// The `uid_map` and `gid_map` texts mapping `agent`'s ids each to itself.
fn map_texts(agent: &AgentIds) -> Result<(String, String), String> {
    let mut gids: Vec<u32> = agent.groups.iter().copied().chain([agent.gid]).collect();
    gids.sort_unstable();
    gids.dedup();
    if gids.len() > MAX_MAP_LINES {
        return Err(format!(
            "the agent's {} groups are more than a user namespace maps ({MAX_MAP_LINES})",
            gids.len()
        ));
    }
    let gid_map = gids.iter().map(|g| format!("{g} {g} 1\n")).collect();
    Ok((format!("{0} {0} 1\n", agent.uid), gid_map))
}

/// Writes the helper's (`pid`, our unreaped child, alive until its socket closes) id maps for
/// `agent`: a root supervisor, with `CAP_SETUID` and `CAP_SETGID` in the parent namespace, may
/// map any ids, and leaves `setgroups` allowed (the agent's groups are set after it joins).
fn write_maps(pid: u32, agent: &AgentIds) -> Result<(), String> {
    let (uid_map, gid_map) = map_texts(agent)?;
    for (name, text) in [("uid_map", uid_map), ("gid_map", gid_map)] {
        let path = format!("/proc/{pid}/{name}");
        std::fs::write(&path, text)
            .map_err(|e| format!("writing {path} of the namespace helper: {e}"))?;
    }
    Ok(())
}

/// `/proc/self/ns/<name>` of the supervisor.
fn open_own(name: &str) -> Result<OwnedFd, String> {
    std::fs::File::open(format!("/proc/self/ns/{name}"))
        .map(OwnedFd::from)
        .map_err(|e| format!("/proc/self/ns/{name}: {e}"))
}

/// Whether two descriptors name the same namespace (device and inode).
fn same_object(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> io::Result<bool> {
    let stat = |fd: BorrowedFd<'_>| -> io::Result<(u64, u64)> {
        let file = std::fs::File::from(fd.try_clone_to_owned()?);
        let meta = file.metadata()?;
        Ok((meta.dev(), meta.ino()))
    };
    Ok(stat(a)? == stat(b)?)
}

/// An `ioctl` returning a new descriptor (`NS_GET_USERNS`, `NS_GET_PARENT`, `SIOCGSKNS`).
fn ioctl_fd(fd: BorrowedFd<'_>, request: libc::c_ulong) -> io::Result<OwnedFd> {
    // SAFETY: these requests take no argument and return a new descriptor or -1.
    let got = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, 0) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the ioctl just returned this new descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(got) })
}

/// The network namespace of a socket (`SIOCGSKNS`; the supervisor, owner of the helper's user
/// namespace, holds `CAP_NET_ADMIN` over it).
fn socket_netns(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    ioctl_fd(fd, SIOCGSKNS)
}

/// Checks the helper's pair: `net` is not the supervisor's, is owned by `user`, and `user` is
/// a child of the supervisor's user namespace.
fn check_pair(user: BorrowedFd<'_>, net: BorrowedFd<'_>) -> Result<(), String> {
    fn io(what: &'static str) -> impl Fn(io::Error) -> String {
        move |e| format!("checking the helper's {what}: {e}")
    }
    let own_net = open_own("net")?;
    let own_user = open_own("user")?;
    if same_object(net, own_net.as_fd()).map_err(io("network namespace"))? {
        return Err("the namespace helper sent the supervisor's own network namespace".into());
    }
    let owner = ioctl_fd(net, NS_GET_USERNS).map_err(io("network namespace's owner"))?;
    if !same_object(owner.as_fd(), user).map_err(io("user namespace"))? {
        return Err("the helper's network namespace is not owned by its user namespace".into());
    }
    let parent = ioctl_fd(user, NS_GET_PARENT).map_err(io("user namespace's parent"))?;
    if !same_object(parent.as_fd(), own_user.as_fd()).map_err(io("user namespace"))? {
        return Err("the helper's user namespace is not a child of the supervisor's".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_supervisors_maps_name_the_agents_ids_only() {
        let agent = AgentIds {
            uid: 1000,
            gid: 1000,
            groups: vec![27, 1000, 4],
        };
        let (uid_map, gid_map) = map_texts(&agent).unwrap();
        assert_eq!(uid_map, "1000 1000 1\n");
        assert_eq!(gid_map, "4 4 1\n27 27 1\n1000 1000 1\n");
        let many = AgentIds {
            groups: (0..400).collect(),
            ..agent
        };
        assert!(map_texts(&many).unwrap_err().contains("340"));
    }
}
