//! Benchmark: offered (content-addressed) uploads against tar through the same transport.
//!
//! ```sh
//! apt-get install zstd                # the compressed tar baseline
//! cargo build --release --workspace --bins
//! cargo bench -p pitcrew-e2e --bench upload      # ROUNDS=3 by default
//! CONTENT=text TRANSPORT=throttled cargo bench -p pitcrew-e2e --bench upload   # one of each
//! ```
//!
//! Needs root and PID namespaces. A generated tree of 20,000 files and 200 MB (the generator of
//! the other benchmarks: random content; and the same files rewritten as text, which zstd takes
//! to about a third; `CONTENT=random` or `text` for one) goes to a destination per round:
//!
//! - **first, plain**: into an empty destination, uncompressed;
//! - **first, zstd**: into another empty destination of a fresh supervisor (which holds nothing
//!   of the tree), the tar stream compressed at `ZSTD_LEVEL` (default 3, `pitcrew run`'s own
//!   level);
//! - **unchanged**: the same tree again, the destination holding it;
//! - **3 changed**: three files of the source rewritten (same sizes, other bytes; [`CHANGED`]);
//! - **another dest**: the same tree into a third, empty destination of the same sandbox: its
//!   content is copied from the trees already there (`unpack::offer::elsewhere`).
//!
//! pitcrew: `pitcrew-init serve --stdio` spawned locally in a PID namespace, `hello` and
//! `claim` (whose answer names the destinations the supervisor holds a listing for), then
//! `upload` with `offer` exactly as `pitcrew run` sends a workspace
//! (`pitcrew_core::unpack::offer::host`): to a destination whose listing the supervisor holds
//! (unchanged, 3 changed), the host walks and hashes its tree once into its offer listing,
//! names the listing by its SHA-256 in the `upload` and sends it when the supervisor asks, as a
//! delta against the listing it holds; to any other (first, another dest) the listing follows
//! the `upload`, each line sent as soon as the files before it are hashed. Then the tar stream
//! of what `need` asks for. Timed from before the host's walk to the `ok`, and split into its
//! phases. Baselines, into a fresh directory each time: `tar -c | tar -x`, and
//! `tar -c | zstd -3 -T0 | … | zstd -d | tar -x`. Every one goes through the same transport
//! (`TRANSPORT=pipe` or `throttled` for one): a plain pipe, and a pipe limited to 20 MiB/s by
//! `throttle` (`src/bin/throttle.rs`, a stand-in for `kubectl exec` over a network: send and
//! receive buffers of 1 MiB and, unlike `pv -L`, no burst after a pause). Bytes sent are counted on the
//! wire (pitcrew: frame payloads; tar: the stream after compression).
//!
//! Every destination is written on a fresh ext4 filesystem (a sparse 8 GiB image on a loop
//! device, made per content and transport, removed after) and nothing is deleted between rounds:
//! each round writes to directories of its own. On a filesystem that has just deleted tens of
//! thousands of files, ext4 searches past the recently freed inodes for every new one
//! (`recently_deleted` under `__ext4_new_inode`, in `perf`), which made creating the same files
//! up to ten times slower for tar and pitcrew alike, and varied from run to run. `BENCH_FS=here`
//! writes under the target directory instead.

#[path = "common/frames.rs"]
mod frames;

use frames::{FrameSink, DATA_FRAME};
use pitcrew_core::protocol::detail::Claimed;
use pitcrew_core::protocol::{read_frame, write_frame, Channel, Frame, Request, Response};
use pitcrew_core::tree_hash::TreeFormat;
use pitcrew_core::unpack::offer::delta;
use pitcrew_core::unpack::offer::host::{list_tree_to, write_needed, OfferListing};
use pitcrew_e2e::{binary, generate_tree, median, target_profile_dir};
use std::collections::BTreeSet;
use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const FILES: u64 = 20_000;
const BYTES: u64 = 200_000_000;
/// The throttled transport's rate.
const RATE: u64 = 20 << 20;
/// Files rewritten for the "3 changed" case: the first, a middle and the last of the generated
/// files of ordinary size (every 200th is a large one of 1 MB).
const CHANGED: [&str; 3] = [
    "d01/s00/f000001.js",
    "d11/s17/f010001.js",
    "d19/s11/f019999.js",
];

fn fail(msg: &str) -> ! {
    eprintln!("bench upload: {msg}");
    std::process::exit(1)
}

/// The transports to run (`TRANSPORT=pipe` or `throttled` for one).
fn transports() -> Vec<Transport> {
    match std::env::var("TRANSPORT").as_deref() {
        Err(_) => vec![Transport::Pipe, Transport::Throttled],
        Ok("pipe") => vec![Transport::Pipe],
        Ok("throttled") => vec![Transport::Throttled],
        Ok(other) => fail(&format!("TRANSPORT={other}: pipe or throttled")),
    }
}

fn rounds() -> usize {
    std::env::var("ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// The transport between the sender and the receiver.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Transport {
    Pipe,
    Throttled,
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Pipe => "local pipe",
            Transport::Throttled => "pipe at 20 MiB/s (throttle: 1 MiB buffers, no burst)",
        }
    }
}

/// Where an offered upload's time went.
#[derive(Clone, Copy)]
struct Phases {
    /// The host walking and hashing its tree for the listing (streamed: and sending it, as
    /// its lines are made).
    listing: Duration,
    /// Named: the `upload` naming the listing, the listing (or its delta) when the supervisor
    /// asks for it; streamed: the listing's last frames. Until the supervisor's `need` arrives
    /// (its parse, kept check or assembly of what it holds).
    need: Duration,
    /// The tar stream of what `need` asked for, until the `ok`.
    rest: Duration,
}

impl Phases {
    fn total(&self) -> Duration {
        self.listing + self.need + self.rest
    }
}

/// One `pitcrew-init serve --stdio` session, its stdin behind the transport.
struct Session {
    serve: Child,
    throttle: Option<Child>,
    w: BufWriter<Box<dyn Write>>,
    r: ChildStdout,
    next_id: u64,
    /// The destinations the supervisor holds a listing for (its `claim` answer, then this
    /// session's uploads): an upload there names its listing by digest; anywhere else the
    /// listing follows the `upload` as it is hashed.
    held: BTreeSet<String>,
}

impl Session {
    fn start(init: &Path, records: &Path, transport: Transport) -> Session {
        let mut throttle = None;
        let stdin = match transport {
            Transport::Pipe => Stdio::piped(),
            Transport::Throttled => {
                let mut child = Command::new(binary("throttle"))
                    .arg(RATE.to_string())
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap_or_else(|e| fail(&format!("throttle: {e}")));
                let out = child.stdout.take().unwrap();
                throttle = Some(child);
                Stdio::from(out)
            }
        };
        let mut serve = Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc"])
            .arg(init)
            .args(["serve", "--stdio", "--records"])
            .arg(records)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let input: Box<dyn Write> = match &mut throttle {
            Some(t) => Box::new(t.stdin.take().unwrap()),
            None => Box::new(serve.stdin.take().unwrap()),
        };
        let r = serve.stdout.take().unwrap();
        let mut s = Session {
            serve,
            throttle,
            w: BufWriter::with_capacity(DATA_FRAME + 16, input),
            r,
            next_id: 2,
            held: BTreeSet::new(),
        };
        s.send(&Request::Hello {
            id: 1,
            versions: vec![1],
            client: "bench".into(),
        });
        s.answer();
        // Claimed as `pitcrew run` claims a sandbox: the answer names the listings held.
        s.send(&Request::Claim {
            id: 2,
            run: "bench".into(),
            plan: None,
            lease_ms: None,
            tunnel: false,
        });
        let claimed: Claimed = match s.answer() {
            Response::Ok { detail, .. } => detail
                .read()
                .unwrap_or_else(|e| fail(&format!("claim: {e}"))),
            other => fail(&format!("claim: {other:?}")),
        };
        s.held = claimed
            .held_listings
            .unwrap_or_else(|| fail("the claim's answer names no held listings"))
            .into_keys()
            .collect();
        s
    }

    fn send(&mut self, req: &Request) {
        write_frame(&mut self.w, &Frame::control(req)).unwrap();
        self.w.flush().unwrap();
    }

    fn answer(&mut self) -> Response {
        read_frame(&mut self.r)
            .unwrap_or_else(|e| fail(&format!("read: {e}")))
            .unwrap_or_else(|| fail("serve --stdio closed the stream"))
            .json()
            .unwrap_or_else(|e| fail(&format!("answer: {e}")))
    }

    /// One offered upload of `src` to `dest`: the time from before the host's walk to the
    /// `ok` in its phases, and the bytes sent (the listing or its delta, and the tar stream).
    /// To a destination the supervisor holds a listing for, the listing is made whole and named
    /// by digest; to any other it follows the `upload` as it is hashed, as `pitcrew run` sends a
    /// workspace.
    fn offer(&mut self, src: &Path, dest: &Path, zstd: Option<i32>) -> (Phases, u64, u64) {
        self.next_id += 1;
        let id = self.next_id;
        let dest = dest.to_str().unwrap().to_string();
        let named = self.held.contains(&dest);
        let start = Instant::now();
        let upload = |listing| Request::Upload {
            id,
            dest: dest.clone(),
            owner: None,
            offer: true,
            compression: zstd.map(|_| "zstd".into()),
            listing,
        };
        let (listed, offered, bitmap, mut sent) = if named {
            let (_, listing) = OfferListing::of_tree(src, TreeFormat::PiTreeV1, None)
                .unwrap_or_else(|e| fail(&e.to_string()));
            let listed = start.elapsed();
            self.send(&upload(Some(listing.named())));
            let mut sent = 0;
            let bitmap = loop {
                match self.answer() {
                    Response::Need { need, .. } => break hex::decode(need).unwrap(),
                    Response::SendListing { chunks, .. } => {
                        let mut frames = FrameSink::new(&mut self.w, Channel::Listing);
                        frames
                            .write_all(&delta::recipe(&listing.bytes, &chunks))
                            .unwrap();
                        sent += frames.finish();
                    }
                    other => fail(&format!("upload: {other:?}")),
                }
            };
            (listed, listing.offered, bitmap, sent)
        } else {
            self.send(&upload(None));
            let mut frames = FrameSink::new(&mut self.w, Channel::Listing);
            let streamed = list_tree_to(src, &mut frames).unwrap_or_else(|e| fail(&e.to_string()));
            let listed = start.elapsed();
            let sent = frames.finish();
            let bitmap = match self.answer() {
                Response::Need { need, .. } => hex::decode(need).unwrap(),
                other => fail(&format!("upload: {other:?}")),
            };
            (listed, streamed.offered, bitmap, sent)
        };
        let needed = start.elapsed();
        let mut tar = FrameSink::new(&mut self.w, Channel::Tar);
        match zstd {
            None => write_needed(&mut tar, &offered, &bitmap).unwrap(),
            Some(level) => {
                let mut z = zstd::Encoder::new(&mut tar, level).unwrap();
                write_needed(&mut z, &offered, &bitmap).unwrap();
                z.finish().unwrap();
            }
        }
        sent += tar.finish();
        let files = match self.answer() {
            Response::Ok { detail, .. } => detail
                .read::<pitcrew_core::protocol::detail::Uploaded>()
                .ok()
                .and_then(|u| u.counts.get("sent_files").and_then(|n| n.as_u64()))
                .unwrap_or(0),
            other => fail(&format!("upload: {other:?}")),
        };
        self.held.insert(dest);
        let took = Phases {
            listing: listed,
            need: needed - listed,
            rest: start.elapsed() - needed,
        };
        (took, sent, files)
    }

    fn close(mut self) {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&Request::Shutdown { id });
        drop(self.w);
        if let Some(mut throttle) = self.throttle.take() {
            let _ = throttle.wait();
        }
        let _ = self.serve.wait();
    }
}

/// `tar -c | [zstd |] transport | [zstd -d |] tar -x` of `src` into a fresh `dest`: the time
/// and the bytes that crossed the transport.
fn tar_upload(src: &Path, dest: &Path, zstd: bool, transport: Transport) -> (Duration, u64) {
    let _ = fs::remove_dir_all(dest);
    fs::create_dir_all(dest).unwrap();
    let (pack, unpack) = if zstd {
        ("| zstd -q -3 -T0 ", "| zstd -q -d ")
    } else {
        ("", "")
    };
    let throttle = match transport {
        Transport::Pipe => String::new(),
        Transport::Throttled => format!("| '{}' {RATE} ", binary("throttle").display()),
    };
    let count = dest.with_extension("bytes");
    let script = format!(
        "set -e; tar -c -C '{}' . {pack}| tee >(wc -c > '{}') {throttle}{unpack}| tar -x -C '{}'",
        src.display(),
        count.display(),
        dest.display()
    );
    let start = Instant::now();
    let status = Command::new("bash").args(["-c", &script]).status().unwrap();
    let took = start.elapsed();
    if !status.success() {
        fail(&format!("{script}: {status}"));
    }
    // `tee`'s counter may finish just after the pipeline.
    let mut bytes = 0;
    for _ in 0..50 {
        if let Some(n) = fs::read_to_string(&count)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            bytes = n;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = fs::remove_file(&count);
    (took, bytes)
}

/// Rewrites the [`CHANGED`] files with other bytes of the same length (`round` makes them
/// differ from every earlier round's).
fn change_three(src: &Path, round: usize) {
    for rel in CHANGED {
        let path = src.join(rel);
        let mut data = fs::read(&path).unwrap();
        for b in &mut data {
            *b = b.wrapping_add(1 + round as u8);
        }
        fs::write(&path, data).unwrap();
    }
}

/// Rewrites every file under `dir` with text of the same size: lines of words from a small
/// vocabulary, as source code and prose compress (zstd -3 takes them to about a third).
fn make_text(dir: &Path, seed: u64) {
    const WORDS: [&str; 48] = [
        "const",
        "let",
        "function",
        "return",
        "if",
        "else",
        "for",
        "while",
        "import",
        "export",
        "from",
        "class",
        "this",
        "new",
        "await",
        "async",
        "value",
        "result",
        "error",
        "config",
        "path",
        "file",
        "tree",
        "hash",
        "sandbox",
        "agent",
        "plugin",
        "options",
        "request",
        "response",
        "string",
        "number",
        "true",
        "false",
        "null",
        "undefined",
        "map",
        "filter",
        "reduce",
        "push",
        "length",
        "index",
        "name",
        "type",
        "data",
        "items",
        "=>",
        "{}",
    ];
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let size = fs::metadata(&path).unwrap().len() as usize;
            let mut text = String::with_capacity(size + 16);
            while text.len() < size {
                let r = next();
                text.push_str(WORDS[(r % 48) as usize]);
                text.push(if r % 11 == 0 { '\n' } else { ' ' });
            }
            text.truncate(size);
            fs::write(&path, text).unwrap();
        }
    }
}

/// The generated tree of `content` (`random` or `text`), made once.
fn source_tree(root: &Path, content: &str) -> PathBuf {
    let src = root.join(format!("src-{content}"));
    if !src.join("index.js").exists() {
        eprintln!("generating the {content} tree: {FILES} files, {BYTES} bytes");
        let _ = fs::remove_dir_all(&src);
        generate_tree(&src, FILES, BYTES, 17).unwrap_or_else(|e| fail(&e.to_string()));
        if content == "text" {
            make_text(&src, 17);
        }
    }
    src
}

fn main() {
    let init = binary("pitcrew-init");
    let root = target_profile_dir().join("bench-upload");
    for tool in ["zstd", "tar", "bash"] {
        if Command::new(tool).arg("--version").output().is_err() {
            fail(&format!("{tool} is not installed (apt-get install zstd)"));
        }
    }
    let level: i32 = std::env::var("ZSTD_LEVEL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let contents: Vec<String> = match std::env::var("CONTENT") {
        Ok(c) => vec![c],
        Err(_) => vec!["random".into(), "text".into()],
    };
    let rounds = rounds();
    for content in &contents {
        let src = source_tree(&root, content);
        for transport in transports() {
            bench(&init, &root, &src, content, transport, level, rounds);
        }
    }
}

/// A fresh ext4 filesystem mounted at `mnt`: unmounted and its image removed when dropped.
struct FreshFs {
    image: PathBuf,
    mnt: PathBuf,
}

impl FreshFs {
    /// Makes and mounts one under `root` (`BENCH_FS=here`: just a directory of `root`).
    fn new(root: &Path) -> FreshFs {
        let mnt = root.join("mnt");
        let image = root.join("fs.img");
        // What an interrupted run left mounted.
        let _ = Command::new("umount")
            .arg(&mnt)
            .stderr(Stdio::null())
            .status();
        let _ = fs::remove_dir_all(&mnt);
        let _ = fs::remove_file(&image);
        fs::create_dir_all(&mnt).unwrap();
        if std::env::var("BENCH_FS").is_ok_and(|v| v == "here") {
            return FreshFs {
                image: PathBuf::new(),
                mnt,
            };
        }
        let run = |program: &str, args: &[&std::ffi::OsStr]| {
            let status = Command::new(program)
                .args(args)
                .status()
                .unwrap_or_else(|e| fail(&format!("{program}: {e}")));
            if !status.success() {
                fail(&format!(
                    "{program} {args:?}: {status} (BENCH_FS=here avoids it)"
                ));
            }
        };
        fs::File::create(&image)
            .and_then(|f| f.set_len(8 << 30))
            .unwrap_or_else(|e| fail(&format!("{}: {e}", image.display())));
        run(
            "mkfs.ext4",
            &["-q".as_ref(), "-F".as_ref(), image.as_os_str()],
        );
        run(
            "mount",
            &[
                "-o".as_ref(),
                "loop".as_ref(),
                image.as_os_str(),
                mnt.as_os_str(),
            ],
        );
        FreshFs { image, mnt }
    }
}

impl Drop for FreshFs {
    fn drop(&mut self) {
        if !self.image.as_os_str().is_empty() {
            let _ = Command::new("umount").arg(&self.mnt).status();
            let _ = fs::remove_file(&self.image);
        }
        let _ = fs::remove_dir_all(&self.mnt);
    }
}

/// One content over one transport: every case, `rounds` times, and the medians printed.
fn bench(
    init: &Path,
    root: &Path,
    src: &Path,
    content: &str,
    transport: Transport,
    level: i32,
    rounds: usize,
) {
    let labels = [
        "first, plain".to_string(),
        format!("first, zstd -{level}"),
        format!("unchanged, zstd -{level}"),
        format!("3 changed, zstd -{level}"),
        format!("another dest, zstd -{level}"),
    ];
    let mut pitcrew: Vec<Vec<Phases>> = vec![Vec::new(); labels.len()];
    let mut bytes = [0u64; 5];
    let mut sent_files = [0u64; 5];
    let (mut tar_times, mut zstd_times) = (Vec::new(), Vec::new());
    let (mut tar_bytes, mut zstd_bytes) = (0, 0);
    let fresh = FreshFs::new(root);
    for round in 0..rounds {
        let base = fresh.mnt.join(format!("round-{round}"));
        let records = base.join("records");
        let dest = base.join("dest");
        fs::create_dir_all(&records).unwrap();
        let mut s = Session::start(init, &records, transport);
        for (i, runs) in pitcrew.iter_mut().enumerate() {
            if i == 1 {
                // A first upload into a sandbox that holds nothing of the tree: a supervisor
                // of its own (the first one would copy it from the plain upload's tree).
                s.close();
                s = Session::start(init, &records, transport);
            }
            if i == 3 {
                change_three(src, round);
            }
            let (target, zstd) = match i {
                0 => (dest.join("plain/tree"), None),
                4 => (dest.join("other/tree"), Some(level)),
                _ => (dest.join("zstd/tree"), Some(level)),
            };
            let (took, sent, files) = s.offer(src, &target, zstd);
            runs.push(took);
            bytes[i] = sent;
            sent_files[i] = files;
        }
        s.close();
        let (took, sent) = tar_upload(src, &base.join("tar-dest"), false, transport);
        tar_times.push(took);
        tar_bytes = sent;
        let (took, sent) = tar_upload(src, &base.join("tar-zstd-dest"), true, transport);
        zstd_times.push(took);
        zstd_bytes = sent;
    }
    drop(fresh);
    let tar_m = median(&mut tar_times);
    let zstd_m = median(&mut zstd_times);
    println!(
        "\n{content} content, {} — {FILES} files, {:.0} MB, {rounds} rounds (medians)",
        transport.name(),
        BYTES as f64 / 1e6
    );
    println!(
        "  tar:                      {:>9.1} ms, {:>11} bytes sent",
        tar_m.as_secs_f64() * 1e3,
        tar_bytes
    );
    println!(
        "  tar | zstd -3:            {:>9.1} ms, {:>11} bytes sent",
        zstd_m.as_secs_f64() * 1e3,
        zstd_bytes
    );
    for (i, runs) in pitcrew.iter().enumerate() {
        let phase = |f: fn(&Phases) -> Duration| {
            let mut times: Vec<Duration> = runs.iter().map(f).collect();
            median(&mut times).as_secs_f64() * 1e3
        };
        let m = Duration::from_secs_f64(phase(Phases::total) / 1e3);
        println!(
            "  pitcrew {:<17} {:>9.1} ms, {:>11} bytes sent ({} files): {:.1}x faster than tar, {:.1}x than tar|zstd; {:.3} % of tar's bytes",
            labels[i],
            m.as_secs_f64() * 1e3,
            bytes[i],
            sent_files[i],
            tar_m.as_secs_f64() / m.as_secs_f64(),
            zstd_m.as_secs_f64() / m.as_secs_f64(),
            bytes[i] as f64 * 100.0 / tar_bytes as f64
        );
        println!(
            "    phases (medians): host listing (walked and hashed; streamed: and sent) {:.1} ms, to need {:.1} ms, tar stream to ok {:.1} ms",
            phase(|p| p.listing),
            phase(|p| p.need),
            phase(|p| p.rest)
        );
    }
}
