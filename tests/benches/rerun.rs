//! Benchmark: what a run costs on the wire when it drives a kept sandbox again.
//!
//! ```sh
//! cargo build --release --workspace --bins
//! cargo bench -p pitcrew-e2e --bench rerun
//! ```
//!
//! Needs root and PID namespaces. Three trees of 20,000 files in total (the generator of the
//! other benchmarks, random content: two plugin trees of 2,000 and 3,000 files pinned in the
//! manifest, and a workspace of 15,000) go into one `pitcrew-init serve` (a control socket, as
//! in a kept sandbox), three times, each time over a new connection as `pitcrew run` drives it:
//! `hello`, `claim` (whose answer names the destinations the supervisor holds a listing for),
//! an offered upload of each tree (to a destination holding a listing, the listing named by its
//! SHA-256, `upload.listing_digest`, and sent only when the supervisor asks, as a delta against
//! the listing it holds; to any other, the listing after the `upload`, the workspace's streamed
//! as it is hashed; the tar stream compressed with zstd -3, `pitcrew run`'s level off the local
//! engine), `set_manifest` with `listings_follow` and each tree's listing named as the one held,
//! one `run` of a command that exits 0 (every tree's digest checked before it starts), and
//! `release`:
//!
//! - **first run**: a sandbox that holds nothing;
//! - **re-run, unchanged**: the same trees;
//! - **re-run, 3 changed**: three files of the workspace rewritten (same sizes, other bytes).
//!
//! Every byte the host writes to the socket is counted (frame headers included), and every byte
//! the supervisor sends back. Baselines: the bytes of `tar -c` of the same trees, and of
//! `tar -c | zstd -3`, and the three changed files compressed alone (`zstd -3` each).

#[path = "common/frames.rs"]
mod frames;

use frames::FrameSink;
use pitcrew_core::manifest::Manifest;
use pitcrew_core::protocol::detail::Claimed;
use pitcrew_core::protocol::{read_frame, write_frame, Channel, Frame, Owner, Request, Response};
use pitcrew_core::tree_hash::TreeFormat;
use pitcrew_core::unpack::offer::delta;
use pitcrew_core::unpack::offer::host::{list_tree_to, write_needed, OfferListing, Offered};
use pitcrew_e2e::{binary, generate_tree, target_profile_dir};
use serde_json::json;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The trees: name, files, bytes, pinned in the manifest (else the workspace).
const TREES: [(&str, u64, u64, bool); 3] = [
    ("plugin-a", 2_000, 10_000_000, true),
    ("plugin-b", 3_000, 15_000_000, true),
    ("workspace", 15_000, 75_000_000, false),
];

/// Workspace files rewritten for the "3 changed" run (of ordinary size).
const CHANGED: [&str; 3] = [
    "d01/s00/f000001.js",
    "d11/s17/f010001.js",
    "d14/s14/f014999.js",
];

/// The zstd level of the tar streams.
const LEVEL: i32 = 3;

/// Stops the benchmark (unwinding, so the supervisor it started is ended).
fn fail(msg: &str) -> ! {
    panic!("bench rerun: {msg}")
}

/// A writer and a reader that count the bytes through them.
struct Counted<T> {
    inner: T,
    bytes: u64,
}

impl<T: Write> Write for Counted<T> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl<T: Read> Read for Counted<T> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
}

/// One connection, as one `pitcrew run` makes it.
struct Conn {
    w: Counted<std::io::BufWriter<UnixStream>>,
    r: Counted<std::io::BufReader<UnixStream>>,
    next_id: u64,
    /// The destinations the supervisor holds a listing for, as its `claim` answer named them.
    held: std::collections::BTreeSet<String>,
}

impl Conn {
    fn open(socket: &Path) -> Conn {
        let stream = UnixStream::connect(socket).unwrap_or_else(|e| fail(&format!("connect: {e}")));
        stream
            .set_read_timeout(Some(Duration::from_secs(300)))
            .unwrap();
        let mut c = Conn {
            w: Counted {
                inner: std::io::BufWriter::with_capacity(1 << 20, stream.try_clone().unwrap()),
                bytes: 0,
            },
            r: Counted {
                inner: std::io::BufReader::new(stream),
                bytes: 0,
            },
            next_id: 0,
            held: Default::default(),
        };
        let id = c.id();
        c.send(&Request::Hello {
            id,
            versions: vec![1],
            client: "bench".into(),
        });
        match c.answer() {
            Response::Hello { capabilities, .. } => {
                if !capabilities.has_feature("upload.listing_digest") {
                    fail("the supervisor lacks upload.listing_digest");
                }
            }
            other => fail(&format!("hello: {other:?}")),
        }
        // Claimed as `pitcrew run` claims the sandbox (and released at the end of the run): the
        // answer names the listings held.
        let id = c.id();
        c.send(&Request::Claim {
            id,
            run: "bench".into(),
            plan: None,
            lease_ms: None,
            tunnel: false,
        });
        let claimed: Claimed = match c.answer() {
            Response::Ok { detail, .. } => detail
                .read()
                .unwrap_or_else(|e| fail(&format!("claim: {e}"))),
            other => fail(&format!("claim: {other:?}")),
        };
        c.held = claimed
            .held_listings
            .unwrap_or_else(|| fail("the claim's answer names no held listings"))
            .into_keys()
            .collect();
        c
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn send(&mut self, req: &Request) {
        write_frame(&mut self.w, &Frame::control(req)).unwrap();
        self.w.flush().unwrap();
    }

    fn answer(&mut self) -> Response {
        loop {
            let frame = read_frame(&mut self.r)
                .unwrap_or_else(|e| fail(&format!("read: {e}")))
                .unwrap_or_else(|| fail("the supervisor closed the connection"));
            if frame.kind == pitcrew_core::protocol::FrameKind::Data {
                continue;
            }
            return frame
                .json()
                .unwrap_or_else(|e| fail(&format!("answer: {e}")));
        }
    }

    fn ok(&mut self, what: &str) -> serde_json::Value {
        match self.answer() {
            Response::Ok { detail, .. } => detail.as_json().clone(),
            other => fail(&format!("{what}: {other:?}")),
        }
    }

    /// An offered upload as `pitcrew run` sends it: named by digest to a destination whose
    /// listing the supervisor holds, else the listing after the `upload` (a pinned tree's made
    /// already, from the walk that computed its pin; the workspace's streamed as it is hashed).
    /// The files sent, and the SHA-256 of the listing the supervisor holds now.
    fn upload(&mut self, dest: &Path, owner: Option<Owner>, tree: Listed) -> (u64, [u8; 32]) {
        let id = self.id();
        let dest_text = dest.to_str().unwrap().to_string();
        let named = self.held.contains(&dest_text);
        let listing = match tree {
            Listed::Made(listing) => listing,
            Listed::Walk(src) if named => {
                OfferListing::of_tree(src, TreeFormat::PiTreeV1, None)
                    .unwrap_or_else(|e| fail(&e.to_string()))
                    .1
            }
            Listed::Walk(src) => {
                self.send(&Request::Upload {
                    id,
                    dest: dest_text.clone(),
                    owner,
                    offer: true,
                    compression: Some("zstd".into()),
                    listing: None,
                });
                let mut frames = FrameSink::new(&mut self.w, Channel::Listing);
                let streamed =
                    list_tree_to(src, &mut frames).unwrap_or_else(|e| fail(&e.to_string()));
                frames.finish();
                let bitmap = match self.answer() {
                    Response::Need { need, .. } => hex::decode(need).unwrap(),
                    other => fail(&format!("upload {}: {other:?}", dest.display())),
                };
                let files = self.send_tar(&streamed.offered, &bitmap);
                self.held.insert(dest_text);
                return (files, streamed.sha256);
            }
        };
        self.send(&Request::Upload {
            id,
            dest: dest_text.clone(),
            owner,
            offer: true,
            compression: Some("zstd".into()),
            listing: named.then(|| listing.named()),
        });
        if !named {
            let mut frames = FrameSink::new(&mut self.w, Channel::Listing);
            frames.write_all(&listing.bytes).unwrap();
            frames.finish();
        }
        let bitmap = loop {
            match self.answer() {
                Response::Need { need, .. } => break hex::decode(need).unwrap(),
                Response::SendListing { chunks, .. } if named => {
                    let mut frames = FrameSink::new(&mut self.w, Channel::Listing);
                    frames
                        .write_all(&delta::recipe(&listing.bytes, &chunks))
                        .unwrap();
                    frames.finish();
                }
                other => fail(&format!("upload {}: {other:?}", dest.display())),
            }
        };
        let files = self.send_tar(&listing.offered, &bitmap);
        self.held.insert(dest_text);
        (files, listing.sha256)
    }

    /// The tar stream of what `bitmap` asks for, compressed, to the `ok`; the files sent.
    fn send_tar(&mut self, offered: &Offered, bitmap: &[u8]) -> u64 {
        let mut tar = FrameSink::new(&mut self.w, Channel::Tar);
        let mut z = zstd::Encoder::new(&mut tar, LEVEL).unwrap();
        write_needed(&mut z, offered, bitmap).unwrap();
        z.finish().unwrap();
        tar.finish();
        self.ok("upload")["sent_files"].as_u64().unwrap_or(0)
    }
}

/// Where an upload's listing comes from.
enum Listed<'a> {
    /// Made already (a pinned tree's, from the walk that computed its pin).
    Made(OfferListing),
    /// The tree to walk now (the workspace).
    Walk(&'a Path),
}

/// The trees as the host holds them: where, and where they go.
struct Tree {
    src: PathBuf,
    dest: PathBuf,
    pinned: bool,
}

/// What one run cost.
struct Cost {
    sent: u64,
    received: u64,
    files: u64,
    took: Duration,
}

/// One run against the sandbox: uploads, manifest, one iteration.
fn run(socket: &Path, trees: &[Tree], manifest: &mut Manifest) -> Cost {
    let start = Instant::now();
    let mut c = Conn::open(socket);
    let mut files = 0;
    // Each pinned tree's listing digest, which its manifest listing names.
    let mut held = std::collections::HashMap::new();
    for t in trees {
        let owner = (!t.pinned).then_some(Owner {
            uid: 65534,
            gid: 65534,
        });
        let pin = manifest
            .trees
            .iter_mut()
            .find(|p| Path::new(&p.path) == t.dest);
        let Some(pin) = pin else {
            files += c.upload(&t.dest, owner, Listed::Walk(&t.src)).0;
            continue;
        };
        // One walk of a pinned tree: its digest (the manifest's pin) and its offer listing.
        let (digest, listing) = OfferListing::of_tree(&t.src, TreeFormat::PiTreeV1, None)
            .unwrap_or_else(|e| fail(&e.to_string()));
        pin.sha256 = digest.sha256.clone();
        let (sent, sha256) = c.upload(&t.dest, owner, Listed::Made(listing));
        files += sent;
        held.insert(pin.name.clone(), hex::encode(sha256));
    }
    let id = c.id();
    c.send(&Request::SetManifest {
        id,
        manifest: Box::new(manifest.without_listings()),
        listings_follow: true,
    });
    c.ok("set_manifest");
    for pin in &manifest.trees {
        let id = c.id();
        c.send(&Request::AddListing {
            id,
            tree: pin.name.clone(),
            files: Default::default(),
            dirs: Vec::new(),
            last: true,
            held_listing: held.get(&pin.name).cloned(),
        });
        c.ok("add_listing");
    }
    let id = c.id();
    c.send(&Request::Run { id, feedback: None });
    loop {
        match c.answer() {
            Response::Result { record, .. } => {
                if record.exit_code != 0 {
                    fail(&format!("the iteration exited {}", record.exit_code));
                }
                break;
            }
            Response::Event { .. } => {}
            other => fail(&format!("run: {other:?}")),
        }
    }
    let id = c.id();
    c.send(&Request::Release { id });
    c.ok("release");
    Cost {
        sent: c.w.bytes,
        received: c.r.bytes,
        files,
        took: start.elapsed(),
    }
}

/// The supervisor of the benchmark's sandbox and its socket: ended when dropped (a failure
/// included) by a `shutdown` request (`unshare --fork` ignores SIGTERM while it waits), else
/// killed.
struct Serve(Child, PathBuf);

impl Drop for Serve {
    fn drop(&mut self) {
        let shut = UnixStream::connect(&self.1).and_then(|mut s| {
            let hello = Request::Hello {
                id: 1,
                versions: vec![1],
                client: "bench".into(),
            };
            write_frame(&mut s, &Frame::control(&hello))?;
            write_frame(&mut s, &Frame::control(&Request::Shutdown { id: 2 }))?;
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).map(|_| ())
        });
        if shut.is_err() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// The bytes of `cmd` run by bash.
fn bytes_of(cmd: &str) -> u64 {
    let out = Command::new("bash")
        .args(["-c", &format!("set -o pipefail; {cmd} | wc -c")])
        .output()
        .unwrap();
    if !out.status.success() {
        fail(&format!("{cmd}: {}", String::from_utf8_lossy(&out.stderr)));
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Rewrites the [`CHANGED`] files with other bytes of the same length.
fn change_three(workspace: &Path) {
    for rel in CHANGED {
        let path = workspace.join(rel);
        let mut data = fs::read(&path).unwrap();
        for b in &mut data {
            *b = b.wrapping_add(1);
        }
        fs::write(&path, data).unwrap();
    }
}

fn main() {
    let init = binary("pitcrew-init");
    let root = target_profile_dir().join("bench-rerun");
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(&root).unwrap();
    let mut trees = Vec::new();
    for (i, (name, files, bytes, pinned)) in TREES.iter().enumerate() {
        let src = root.join("host").join(name);
        generate_tree(&src, *files, *bytes, 31 + i as u64).unwrap_or_else(|e| fail(&e.to_string()));
        let dest = match pinned {
            true => root.join("sandbox/plugins").join(name),
            false => root.join("sandbox/work"),
        };
        trees.push(Tree {
            src,
            dest,
            pinned: *pinned,
        });
    }
    let socket = root.join("run/control.sock");
    let serve: Child = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(&init)
        .args(["serve", "--socket"])
        .arg(&socket)
        .arg("--records")
        .arg(root.join("records"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| fail(&format!("unshare: {e}")));
    let serve = Serve(serve, socket.clone());
    for _ in 0..500 {
        if socket.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let workdir = root.join("sandbox/work");
    let pins: Vec<_> = trees
        .iter()
        .filter(|t| t.pinned)
        .map(|t| {
            json!({
                "name": t.dest.file_name().unwrap().to_str().unwrap(), "path": t.dest,
                "role": "plugin", "kind": "data", "format": "pi-tree-v1",
                "sha256": "0".repeat(64),
            })
        })
        .collect();
    let mut manifest: Manifest = serde_json::from_value(json!({
        "version": 1,
        "runtime": "command",
        "agent": {"binary": "/bin/sh", "args": ["-c", "exit 0"]},
        "workdir": workdir,
        "trees": pins,
    }))
    .unwrap_or_else(|e| fail(&format!("manifest: {e}")));

    let mut tar_bytes = 0;
    let mut zstd_bytes = 0;
    for t in &trees {
        let src = t.src.display();
        tar_bytes += bytes_of(&format!("tar -c -C '{src}' ."));
        zstd_bytes += bytes_of(&format!("tar -c -C '{src}' . | zstd -q -{LEVEL} -T0"));
    }
    let first = run(&socket, &trees, &mut manifest);
    let unchanged = run(&socket, &trees, &mut manifest);
    let workspace = &trees[2].src;
    change_three(workspace);
    let changed_bytes: u64 = CHANGED
        .iter()
        .map(|rel| {
            bytes_of(&format!(
                "zstd -q -{LEVEL} -c '{}'",
                workspace.join(rel).display()
            ))
        })
        .sum();
    let changed = run(&socket, &trees, &mut manifest);
    drop(serve);

    let files: u64 = TREES.iter().map(|t| t.1).sum();
    println!("\nre-run of a kept sandbox — {files} files in 3 trees (2 pinned), zstd -{LEVEL}");
    println!("  tar of the trees:           {tar_bytes:>11} bytes");
    println!("  tar | zstd -{LEVEL}:               {zstd_bytes:>11} bytes");
    for (label, cost) in [
        ("first run", &first),
        ("re-run, unchanged", &unchanged),
        ("re-run, 3 changed", &changed),
    ] {
        println!(
            "  pitcrew {label:<19} host sent {:>11} bytes ({:.3} % of tar), supervisor sent {:>9} bytes; {} files sent; {:.1} ms",
            cost.sent,
            cost.sent as f64 * 100.0 / tar_bytes as f64,
            cost.received,
            cost.files,
            cost.took.as_secs_f64() * 1e3
        );
    }
    println!("  the 3 changed files, each zstd -{LEVEL}: {changed_bytes} bytes");
    let unchanged_ok = unchanged.sent <= 16 << 10;
    let changed_ok = changed.sent <= (64 << 10) + changed_bytes;
    println!(
        "  targets: unchanged <= 16384 bytes: {}; 3 changed <= 65536 + {changed_bytes} bytes: {}",
        if unchanged_ok { "met" } else { "MISSED" },
        if changed_ok { "met" } else { "MISSED" }
    );
    let _ = fs::remove_dir_all(&root);
}
