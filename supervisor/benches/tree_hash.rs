//! Tree-hashing benchmark (not a timed test): pitcrew in-process, `pitcrew-init hash` as a
//! subprocess and the shell pipeline, interleaved, on a generated tree of ≥ 20,000 files and
//! ≥ 200 MB; plus single-core SHA-256 throughput and the resulting hardware limit, and the
//! *read(2) floor*: the same files hashed by the least work any implementation that reads them
//! through the kernel must do (`openat` in an already open directory, `fstat`, `read`, SHA-256,
//! on every core, files claimed from one atomic counter), without walking, sorting, checking
//! names or building records. Two variants bound what is left: the floor with files of 1 MiB
//! or more mapped instead of read (no page-cache copy), and one null syscall's round trip (the
//! most that batching syscalls could save per call).
//!
//! ```sh
//! cargo bench -p pitcrew-supervisor --bench tree_hash
//! ```
//!
//! Environment: `PITCREW_BENCH_ROUNDS` (default 7), `PITCREW_BENCH_FILES` (small files, default
//! 20000), `PITCREW_BENCH_LARGE` (large files, default 16), `PITCREW_BENCH_SEED` (default 1),
//! `PITCREW_BENCH_TREES` (where trees are cached, default `<target>/bench-trees`). The binary is
//! the one cargo builds for this bench (`CARGO_BIN_EXE_pitcrew-init`, bench profile = release).
//! Exits non-zero if the three digests ever disagree.

#![allow(clippy::disallowed_macros)] // a benchmark prints its report; it is not PID 1

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pitcrew_core::tree_hash::{hash_tree, TreeFormat};
use rustix::fs::{Mode, OFlags};
use sha2::{Digest, Sha256};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};

const PIPELINE: &str = r#"cd "$1" && { find . -type f -exec sha256sum {} + | LC_ALL=C sort; find . -type d | LC_ALL=C sort | sha256sum; } | sha256sum | cut -d' ' -f1"#;

/// splitmix64: small, deterministic, good enough for file contents and sizes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    // <target>/release/deps/tree_hash-<hash>
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("target"))
}

/// Generates the tree once; later runs reuse it (keyed by the parameters).
fn tree(files: u64, large: u64, seed: u64) -> PathBuf {
    let base = std::env::var_os("PITCREW_BENCH_TREES")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("bench-trees"));
    let dir = base.join(format!("v1-files{files}-large{large}-seed{seed}"));
    if dir.is_dir() {
        return dir;
    }
    let tmp = base.join(format!("tmp-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    eprintln!("generating {} ...", dir.display());
    let mut rng = Rng(seed);
    let mut buf = vec![0u8; 16 << 20];
    let mut write = |rel: &str, size: usize, rng: &mut Rng| {
        let path = tmp.join(rel);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        rng.fill(&mut buf[..size]);
        fs::write(&path, &buf[..size]).expect("write");
    };
    for i in 0..files {
        // Mostly small files (80% under 8 KiB), some up to 40 KiB, a few empty.
        let size = match rng.below(100) {
            0..=1 => 0,
            2..=79 => rng.below(8 << 10),
            _ => (8 << 10) + rng.below(32 << 10),
        } as usize;
        let rel = format!(
            "pkg{}/lib{}/{}file{i}.js",
            i % 10,
            (i / 10) % 20,
            if i % 97 == 0 { ".hidden-" } else { "" }
        );
        write(&rel, size, &mut rng);
    }
    for i in 0..large {
        let size = ((4 << 20) + rng.below(8 << 20)) as usize;
        write(&format!("assets/blob{i}.bin"), size, &mut rng);
    }
    for i in 0..5 {
        fs::create_dir_all(tmp.join(format!("empty/e{i}"))).expect("mkdir");
    }
    fs::rename(&tmp, &dir).expect("rename");
    dir
}

/// CPU time (user + system) of this process and of its waited-for children, from
/// `/proc/self/stat` (clock-tick resolution; Linux only, zero elsewhere).
fn cpu_times(ticks_per_sec: f64) -> (Duration, Duration) {
    let stat = fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_comm = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    // Fields after `comm`: state is field 3; utime 14, stime 15, cutime 16, cstime 17.
    let fields: Vec<f64> = after_comm
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    let get = |n: usize| fields.get(n - 3).copied().unwrap_or(0.0) / ticks_per_sec;
    (
        Duration::from_secs_f64(get(14) + get(15)),
        Duration::from_secs_f64(get(16) + get(17)),
    )
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    times[times.len() / 2]
}

fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

/// How much of the floor's work to do (for the single-thread breakdown).
#[derive(Clone, Copy, PartialEq, PartialOrd)]
enum Stage {
    /// `openat` and `close`.
    Open,
    /// … and `fstat`.
    Stat,
    /// … and `read` every byte.
    Read,
    /// … and SHA-256 (the floor).
    Hash,
}

/// The read(2) floor: every file of `files` (directory index, name) opened relative to its
/// already open directory, `fstat`ed, read in 64 KiB chunks into SHA-256, on `cores` threads.
/// Returns the bytes hashed.
fn floor(dirs: &[OwnedFd], files: &[(usize, String)], cores: usize) -> u64 {
    floor_stage(dirs, files, cores, Stage::Hash, u64::MAX)
}

/// [`floor`] up to `stage`; files of `mmap_from` bytes or more are mapped instead of read (no
/// `MAP_POPULATE`: pages are mapped by the faults of the hash reading them).
fn floor_stage(
    dirs: &[OwnedFd],
    files: &[(usize, String)],
    cores: usize,
    stage: Stage,
    mmap_from: u64,
) -> u64 {
    let next = AtomicUsize::new(0);
    let work = || {
        let mut buf = vec![0u8; 64 << 10];
        let mut bytes = 0u64;
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some((dir, name)) = files.get(i) else {
                return bytes;
            };
            let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
            let fd = rustix::fs::openat(&dirs[*dir], name.as_str(), flags, Mode::empty())
                .unwrap_or_else(|e| fail(&format!("floor: open {name}: {e}")));
            if stage == Stage::Open {
                continue;
            }
            let size = rustix::fs::fstat(&fd)
                .unwrap_or_else(|e| fail(&format!("floor: fstat {name}: {e}")))
                .st_size as u64;
            if stage == Stage::Stat {
                continue;
            }
            if size >= mmap_from && size > 0 {
                bytes += hash_mapped(&fd, size, name);
                continue;
            }
            let mut hasher = Sha256::new();
            let mut read = 0u64;
            loop {
                let n = rustix::io::read(&fd, &mut buf)
                    .unwrap_or_else(|e| fail(&format!("floor: read {name}: {e}")));
                if stage == Stage::Hash {
                    hasher.update(&buf[..n]);
                }
                read += n as u64;
                if n == 0 || (n < buf.len() && read == size) {
                    break;
                }
            }
            std::hint::black_box(hasher.finalize());
            bytes += read;
        }
    };
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..cores).map(|_| scope.spawn(work)).collect();
        let mut total = work();
        for h in helpers {
            total += h.join().unwrap_or(0);
        }
        total
    })
}

/// SHA-256 of a file through a shared read-only mapping; returns its size.
fn hash_mapped(fd: &OwnedFd, size: u64, name: &str) -> u64 {
    let len = usize::try_from(size).unwrap_or_else(|_| fail("floor: file too large to map"));
    // SAFETY: a fresh mapping chosen by the kernel (null hint), read-only and private to this
    // call; the bench's tree is its own cache directory and nothing truncates it while mapped.
    let ptr = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len,
            rustix::mm::ProtFlags::READ,
            rustix::mm::MapFlags::SHARED,
            fd,
            0,
        )
    }
    .unwrap_or_else(|e| fail(&format!("floor: mmap {name}: {e}")));
    // SAFETY: `ptr` is the start of a live mapping of `len` readable bytes (above).
    let data = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
    std::hint::black_box(Sha256::digest(data));
    // SAFETY: the mapping made above, no longer borrowed (`data` is not used after this).
    unsafe { rustix::mm::munmap(ptr, len) }
        .unwrap_or_else(|e| fail(&format!("floor: munmap {name}: {e}")));
    size
}

/// Files of this size or more are mapped in the mapped variant of the floor.
const MAP_FROM: u64 = 1 << 20;

fn fail(msg: &str) -> ! {
    eprintln!("tree_hash bench: {msg}");
    std::process::exit(1)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` would run us too: do nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rounds = env_num("PITCREW_BENCH_ROUNDS", 7).max(1) as usize;
    let files = env_num("PITCREW_BENCH_FILES", 20_000);
    let large = env_num("PITCREW_BENCH_LARGE", 16);
    let seed = env_num("PITCREW_BENCH_SEED", 1);
    let root = tree(files, large, seed);
    let bin = env!("CARGO_BIN_EXE_pitcrew-init");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());

    // Warm the page cache (and check the tree).
    let warm = hash_tree(&root, TreeFormat::PiTreeV1).unwrap_or_else(|e| fail(&e.to_string()));
    let total_bytes = warm.listing.total_bytes();
    let file_count = warm.listing.files.len();
    let dir_count = warm.listing.dirs.len() + 1;

    // The floor's inputs, prepared once: every directory open, every file as (directory, name).
    let mut dir_index = std::collections::HashMap::new();
    let mut dir_fds = Vec::new();
    let mut floor_files = Vec::with_capacity(file_count);
    for file in &warm.listing.files {
        let (dir, name) = file.path.rsplit_once('/').unwrap_or(("", &file.path));
        let index = *dir_index.entry(dir.to_owned()).or_insert_with(|| {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
            let fd = rustix::fs::open(root.join(dir), flags, Mode::empty())
                .unwrap_or_else(|e| fail(&format!("floor: open {dir}: {e}")));
            dir_fds.push(fd);
            dir_fds.len() - 1
        });
        floor_files.push((index, name.to_owned()));
    }
    let mut t_floor = Vec::new();
    let mut t_mapped = Vec::new();

    let mut t_lib = Vec::new();
    let mut t_bin = Vec::new();
    let mut t_sh = Vec::new();
    let (mut c_lib, mut c_bin, mut c_sh) = (Vec::new(), Vec::new(), Vec::new());
    let tck = clock_ticks();
    for round in 0..rounds {
        let cpu0 = cpu_times(tck);
        let start = Instant::now();
        let lib = hash_tree(&root, TreeFormat::PiTreeV1).unwrap_or_else(|e| fail(&e.to_string()));
        t_lib.push(start.elapsed());
        let cpu1 = cpu_times(tck);
        c_lib.push(cpu1.0.saturating_sub(cpu0.0));

        let start = Instant::now();
        let out = Command::new(bin)
            .arg("hash")
            .arg(&root)
            .output()
            .unwrap_or_else(|e| fail(&format!("run {bin}: {e}")));
        t_bin.push(start.elapsed());
        let cpu2 = cpu_times(tck);
        c_bin.push(cpu2.1.saturating_sub(cpu1.1));
        if !out.status.success() {
            fail(&format!(
                "{bin} hash failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let bin_digest = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned();

        let start = Instant::now();
        let out = Command::new("bash")
            .args(["-c", PIPELINE, "bash"])
            .arg(&root)
            .env("LC_ALL", "C")
            .output()
            .unwrap_or_else(|e| fail(&format!("run bash: {e}")));
        t_sh.push(start.elapsed());
        c_sh.push(cpu_times(tck).1.saturating_sub(cpu2.1));
        let sh_digest = String::from_utf8_lossy(&out.stdout).trim().to_owned();

        let start = Instant::now();
        let floor_bytes = floor(&dir_fds, &floor_files, cores);
        t_floor.push(start.elapsed());
        let start = Instant::now();
        let mapped_bytes = floor_stage(&dir_fds, &floor_files, cores, Stage::Hash, MAP_FROM);
        t_mapped.push(start.elapsed());
        if floor_bytes != total_bytes || mapped_bytes != total_bytes {
            fail(&format!(
                "floor: read {floor_bytes} bytes ({mapped_bytes} mapped), the tree has {total_bytes}"
            ));
        }

        if lib.sha256 != bin_digest || lib.sha256 != sh_digest {
            fail(&format!(
                "digests disagree in round {round}: in-process {}, subprocess {bin_digest}, shell {sh_digest}",
                lib.sha256
            ));
        }
        eprintln!(
            "round {round}: in-process {}, subprocess {}, shell {}, read(2) floor {}, mapped {}",
            secs(t_lib[round]),
            secs(t_bin[round]),
            secs(t_sh[round]),
            secs(t_floor[round]),
            secs(t_mapped[round])
        );
    }

    // Single-core SHA-256 throughput on an in-memory buffer (best of 5).
    let mut buf = vec![0u8; 256 << 20];
    Rng(seed).fill(&mut buf);
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        let digest = Sha256::digest(&buf);
        best = best.min(start.elapsed());
        std::hint::black_box(digest);
    }
    let throughput = buf.len() as f64 / best.as_secs_f64();

    // Where the floor's time goes, on one thread (best of 3 per stage).
    let breakdown: Vec<Duration> = [Stage::Open, Stage::Stat, Stage::Read, Stage::Hash]
        .into_iter()
        .map(|stage| {
            (0..3)
                .map(|_| {
                    let start = Instant::now();
                    floor_stage(&dir_fds, &floor_files, 1, stage, u64::MAX);
                    start.elapsed()
                })
                .min()
                .unwrap_or_default()
        })
        .collect();
    // One syscall's round trip (what batching syscalls, e.g. with io_uring, could save at most
    // per call): `getppid`, best of 5 runs of 100,000.
    let null_syscall = (0..5)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..100_000 {
                std::hint::black_box(rustix::process::getppid());
            }
            start.elapsed() / 100_000
        })
        .min()
        .unwrap_or_default();
    let per_file = |d: Duration| d.as_secs_f64() * 1e6 / file_count.max(1) as f64;
    let limit = total_bytes as f64 / throughput / cores as f64;

    let (lib, bin_t, sh) = (median(&mut t_lib), median(&mut t_bin), median(&mut t_sh));
    let floor_t = median(&mut t_floor);
    let mapped_t = median(&mut t_mapped);
    let (cpu_lib, cpu_bin, cpu_sh) = (median(&mut c_lib), median(&mut c_bin), median(&mut c_sh));
    let sha_cpu = total_bytes as f64 / throughput;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "tree: {} ({file_count} files, {dir_count} dirs, {:.1} MB)\ncores: {cores}, rounds: {rounds}\n\
         single-core SHA-256: {:.0} MB/s; hardware limit: {:.3} s\n\
         median in-process hash_tree:    {}\n\
         median pitcrew-init hash:       {}\n\
         median shell pipeline:          {}\n\
         shell / pitcrew (in-process):   {:.1}x\n\
         shell / pitcrew (subprocess):   {:.1}x\n\
         pitcrew / hardware limit:       {:.2}x (in-process), {:.2}x (subprocess)\n\
         median read(2) floor:           {} ({:.2}x the hardware limit; shell / floor {:.1}x)\n\
         median floor, files >= 1 MiB mapped: {} ({:.2}x the hardware limit)\n\
         pitcrew / read(2) floor:        {:.2}x (in-process), {:.2}x (subprocess)\n\
         null syscall (getppid):         {:.2} us\n\
         floor on 1 thread, best of 3:   openat+close {} ({:.1} us/file), +fstat {} ({:.1} us/file), +read {}, +SHA-256 {}\n\
         median CPU time (user+sys): in-process {}, subprocess {}, shell {}\n\
         CPU: shell / pitcrew {:.1}x; pitcrew / pure SHA-256 CPU ({:.3} s) {:.2}x\n\
         digest: {}",
        root.display(),
        total_bytes as f64 / 1e6,
        throughput / 1e6,
        limit,
        secs(lib),
        secs(bin_t),
        secs(sh),
        sh.as_secs_f64() / lib.as_secs_f64(),
        sh.as_secs_f64() / bin_t.as_secs_f64(),
        lib.as_secs_f64() / limit,
        bin_t.as_secs_f64() / limit,
        secs(floor_t),
        floor_t.as_secs_f64() / limit,
        sh.as_secs_f64() / floor_t.as_secs_f64(),
        secs(mapped_t),
        mapped_t.as_secs_f64() / limit,
        lib.as_secs_f64() / floor_t.as_secs_f64(),
        bin_t.as_secs_f64() / floor_t.as_secs_f64(),
        null_syscall.as_secs_f64() * 1e6,
        secs(breakdown[0]),
        per_file(breakdown[0]),
        secs(breakdown[1]),
        per_file(breakdown[1]),
        secs(breakdown[2]),
        secs(breakdown[3]),
        secs(cpu_lib),
        secs(cpu_bin),
        secs(cpu_sh),
        cpu_sh.as_secs_f64() / cpu_bin.as_secs_f64().max(1e-9),
        sha_cpu,
        cpu_bin.as_secs_f64() / sha_cpu,
        warm.sha256,
    );
}
