//! The seccomp filter of the agent's process tree.
//!
//! A verified hook adapter runs *inside* the runtime (a pi extension in pi's Node process). A
//! tool the runtime starts (pi's `bash` tool) has the runtime's uid, so without more it could
//! rewrite the runtime under the adapter: attach with `ptrace`, write its memory with
//! `process_vm_writev`, copy its descriptors with `pidfd_getfd` (the stdout the judge reads, the
//! model connection), or send Node's `SIGUSR1` and drive the inspector that opens. The filter,
//! installed in the child right before `execve` and inherited by every descendant, refuses
//! those system calls with `EPERM`, refuses sending `SIGUSR1` through any of the signal
//! system calls, and refuses `fcntl(F_SETSIG)`: with it a process chooses the signal the kernel
//! itself sends to a descriptor's owner (`F_SETOWN` may name any process of the same uid) when
//! I/O is possible, a lease breaks or a directory changes, so `SIGUSR1` would reach the runtime
//! without any signal system call. The kernel keyring calls (`add_key`, `request_key`,
//! `keyctl`) are refused too: a uid's keyring outlives every process and namespace of the
//! sandbox, a channel to later iterations and to other sandboxes of the same uid. (Writing `/proc/<pid>/mem` is an `open`, which seccomp cannot tell apart; it
//! needs write access below `/proc`, which the Landlock ruleset does not grant.)
//!
//! Some system calls act on another process by its id and need only the same uid, no ptrace
//! access check: `prlimit64` (the unprivileged mode's agent shares the supervisor's uid and could
//! set the supervisor's `RLIMIT_FSIZE` to 0, losing every later record), `setpriority`,
//! `ioprio_set`, the `sched_set*` calls (`SCHED_IDLE` starves a process), `migrate_pages` and
//! `move_pages`. The agent's tree may make them on itself only: the id must be 0 (the calling
//! thread, process or group), and `setpriority`/`ioprio_set` may not name a whole user
//! ([`SELF_ONLY_SYSCALLS`]). A process naming itself or one of its threads by number is refused
//! too; glibc's `setrlimit`, `nice`, `sched_setaffinity(0, …)` and `ionice`/`taskset`/`prlimit`
//! running a command all pass 0. The other calls that take a process id (`kcmp`,
//! `get_robust_list`, `process_madvise`, `perf_event_open`, `pidfd_getfd`, `process_vm_*`, the
//! `/proc/<pid>` files) pass the kernel's ptrace access check, which Landlock's domain and a
//! different uid both fail for the supervisor; reading another process's priority or affinity
//! stays allowed (glibc's `pthread_getattr_np` reads its own thread's affinity by id).
//!
//! Setting an extended attribute fails with `EOPNOTSUPP` ([`UNSUPPORTED_SYSCALLS`]): a default
//! POSIX ACL on a directory the agent owns (in the unprivileged mode the supervisor's records
//! and upload directories) would make every entry the supervisor creates there later start
//! with mode 000, and a `user.*` attribute would travel with a file into the next upload. The
//! `io_uring` calls fail with `ENOSYS` ([`ABSENT_SYSCALLS`]): a ring makes `setxattr` and
//! `fallocate` without a system call this filter sees.
//!
//! `socket` and `socketpair` create only `AF_UNIX`, `AF_INET`, `AF_INET6` and `AF_NETLINK`
//! sockets ([`SOCKET_FAMILIES`]); any other family fails with `EAFNOSUPPORT`, as on a kernel
//! without it. A network namespace does not cover every family: `AF_VSOCK` reaches the
//! hypervisor of a virtual machine whatever namespace the agent is in, past egress control.
//!
//! With a disk budget ([`super::disk_budget`]) `fallocate` fails with `EOPNOTSUPP`: it
//! allocates gigabytes in microseconds, far inside one sample of the budget's watch, while
//! written bytes come at the disk's pace. (glibc's `posix_fallocate` then writes the range.)
//!
//! The program is a few dozen classic BPF instructions built here by hand rather than with a crate:
//! it is small enough to read whole, and the supervisor stays free of a filter compiler. It
//! checks the architecture first: a system call of another ABI of the same machine (i386 or x32
//! on x86-64, arm32 on arm64) could otherwise reach the same kernel function under a number
//! the filter does not list, so every foreign-ABI call fails with `ENOSYS`.

/// The system calls the agent's tree may not make, by name (for the record).
pub const DENIED_SYSCALLS: [&str; 7] = [
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "add_key",
    "request_key",
    "keyctl",
];

/// System calls the agent's tree may make on itself only (id 0; for `setpriority` and
/// `ioprio_set` not a whole user), by name (for the record).
pub const SELF_ONLY_SYSCALLS: [&str; 9] = [
    "prlimit64",
    "setpriority",
    "ioprio_set",
    "sched_setaffinity",
    "sched_setscheduler",
    "sched_setparam",
    "sched_setattr",
    "migrate_pages",
    "move_pages",
];

/// `fcntl` commands the agent's tree may not use, by name (for the record).
pub const DENIED_FCNTL: [&str; 1] = ["F_SETSIG"];

/// System calls that fail with `EOPNOTSUPP` in every iteration, as on a file system without
/// extended attributes: with them the agent would give the directories it owns a default POSIX
/// ACL, which Landlock does not cover and `chmod` does not undo, and every entry the supervisor
/// creates below them later would start with mode 000 (its records, its upload staging).
pub const UNSUPPORTED_SYSCALLS: [&str; 4] = ["setxattr", "lsetxattr", "fsetxattr", "setxattrat"];

/// System calls that fail with `ENOSYS`, as on a kernel without them: an `io_uring` ring makes
/// system calls (`setxattr`, `fallocate`) that no seccomp filter sees. Runtimes fall back
/// (libuv, Node).
pub const ABSENT_SYSCALLS: [&str; 3] = ["io_uring_setup", "io_uring_enter", "io_uring_register"];

/// System calls that fail with `EOPNOTSUPP` when the manifest sets a disk budget.
pub const UNSUPPORTED_WITH_DISK_BUDGET: [&str; 1] = ["fallocate"];

/// The address families the agent's tree may create sockets of, by name and number; every
/// other family fails with `EAFNOSUPPORT`.
pub const SOCKET_FAMILIES: [(&str, i32); 4] = [
    ("AF_UNIX", libc::AF_UNIX),
    ("AF_INET", libc::AF_INET),
    ("AF_INET6", libc::AF_INET6),
    ("AF_NETLINK", libc::AF_NETLINK),
];
/// Signals no process of the agent's tree may send, by name (for the record).
pub const DENIED_SIGNALS: [&str; 1] = ["SIGUSR1"];

// Classic BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGE_K: u16 = 0x35;
const BPF_RET_K: u16 = 0x06;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const SECCOMP_MODE_FILTER: libc::c_ulong = 2;
/// `F_SETSIG` (linux/fcntl.h; not exported by the `libc` crate): the signal sent for a
/// descriptor's I/O, lease and directory notifications.
const F_SETSIG: u32 = 10;

// Offsets in `struct seccomp_data`.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;
const fn data_arg_low(index: u32) -> u32 {
    // `args[i]` is a u64 at 16 + 8i; the low half comes first on the little-endian machines
    // this filter is built for, and the kernel reads every signal argument as an `int`.
    16 + 8 * index
}

#[cfg(target_arch = "x86_64")]
mod arch {
    /// `AUDIT_ARCH_X86_64`.
    pub const AUDIT_ARCH: u32 = 0xc000_003e;
    /// x32 system calls carry the native arch with this bit set in the number.
    pub const FOREIGN_NR_BIT: Option<u32> = Some(0x4000_0000);
}

#[cfg(target_arch = "aarch64")]
mod arch {
    /// `AUDIT_ARCH_AARCH64`.
    pub const AUDIT_ARCH: u32 = 0xc000_00b7;
    /// No second ABI shares the native arch value.
    pub const FOREIGN_NR_BIT: Option<u32> = None;
}

/// Where a jump goes.
#[derive(Debug, Clone, Copy)]
enum To {
    Next,
    Skip(u8),
    Allow,
    Deny,
    NoSys,
    Unsupported,
    NoFamily,
}

#[derive(Debug, Clone, Copy)]
struct Insn {
    code: u16,
    jt: To,
    jf: To,
    k: u32,
}

fn load(offset: u32) -> Insn {
    Insn {
        code: BPF_LD_W_ABS,
        jt: To::Next,
        jf: To::Next,
        k: offset,
    }
}

fn jump(code: u16, k: u32, jt: To, jf: To) -> Insn {
    Insn { code, jt, jf, k }
}

/// The compiled filter, ready for `PR_SET_SECCOMP` in the child.
#[derive(Debug)]
pub struct Filter {
    program: Vec<libc::sock_filter>,
}

/// The signal system calls and the index of their signal argument.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn signal_syscalls() -> [(libc::c_long, u32); 6] {
    [
        (libc::SYS_kill, 1),
        (libc::SYS_tkill, 1),
        (libc::SYS_tgkill, 2),
        (libc::SYS_rt_sigqueueinfo, 1),
        (libc::SYS_rt_tgsigqueueinfo, 2),
        (libc::SYS_pidfd_send_signal, 1),
    ]
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn denied_numbers() -> [libc::c_long; 7] {
    [
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_keyctl,
    ]
}

/// A call that acts on a process by id: the argument holding the id, and where the call also
/// says what kind of id it is, that argument and the first kind refused (a user).
#[derive(Debug, Clone, Copy)]
struct SelfOnly {
    nr: libc::c_long,
    id_arg: u32,
    kind: Option<(u32, u32)>,
}

/// The calls of [`SELF_ONLY_SYSCALLS`], in its order.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn self_only_syscalls() -> [SelfOnly; 9] {
    let id0 = |nr| SelfOnly {
        nr,
        id_arg: 0,
        kind: None,
    };
    // setpriority(which, who, prio): PRIO_USER (2) names every process of a uid.
    // ioprio_set(which, who, ioprio): IOPRIO_WHO_USER (3) likewise.
    let by_kind = |nr, user| SelfOnly {
        nr,
        id_arg: 1,
        kind: Some((0, user)),
    };
    [
        id0(libc::SYS_prlimit64),
        by_kind(libc::SYS_setpriority, 2),
        by_kind(libc::SYS_ioprio_set, 3),
        id0(libc::SYS_sched_setaffinity),
        id0(libc::SYS_sched_setscheduler),
        id0(libc::SYS_sched_setparam),
        id0(libc::SYS_sched_setattr),
        id0(libc::SYS_migrate_pages),
        id0(libc::SYS_move_pages),
    ]
}

/// `setxattrat` (Linux 6.13; one number on every architecture since 5.1's common table), which
/// the `libc` crate does not name yet.
const SYS_SETXATTRAT: libc::c_long = 463;

/// The calls of [`UNSUPPORTED_SYSCALLS`] and [`ABSENT_SYSCALLS`], in their order.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn unsupported_and_absent_numbers() -> ([libc::c_long; 4], [libc::c_long; 3]) {
    (
        [
            libc::SYS_setxattr,
            libc::SYS_lsetxattr,
            libc::SYS_fsetxattr,
            SYS_SETXATTRAT,
        ],
        [
            libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter,
            libc::SYS_io_uring_register,
        ],
    )
}

fn nr(n: libc::c_long) -> u32 {
    // System call numbers are small non-negative integers.
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl Filter {
    /// Builds the filter for this machine's architecture, refusing `fallocate` too with
    /// `disk_budget`; `Err` names why there is none.
    pub fn build(disk_budget: bool) -> Result<Filter, String> {
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        {
            let mut insns = vec![
                load(DATA_ARCH),
                jump(BPF_JEQ_K, arch::AUDIT_ARCH, To::Next, To::NoSys),
                load(DATA_NR),
            ];
            if let Some(bit) = arch::FOREIGN_NR_BIT {
                insns.push(jump(BPF_JGE_K, bit, To::NoSys, To::Next));
            }
            for n in denied_numbers() {
                insns.push(jump(BPF_JEQ_K, nr(n), To::Deny, To::Next));
            }
            let (unsupported, absent) = unsupported_and_absent_numbers();
            for n in unsupported {
                insns.push(jump(BPF_JEQ_K, nr(n), To::Unsupported, To::Next));
            }
            for n in absent {
                insns.push(jump(BPF_JEQ_K, nr(n), To::NoSys, To::Next));
            }
            if disk_budget {
                insns.push(jump(
                    BPF_JEQ_K,
                    nr(libc::SYS_fallocate),
                    To::Unsupported,
                    To::Next,
                ));
            }
            // socket(family, …) and socketpair(family, …): the family is the first argument.
            let families = SOCKET_FAMILIES.len();
            for n in [libc::SYS_socket, libc::SYS_socketpair] {
                let checks = u8::try_from(families + 1).unwrap_or(u8::MAX);
                insns.push(jump(BPF_JEQ_K, nr(n), To::Next, To::Skip(checks)));
                insns.push(load(data_arg_low(0)));
                for (i, (_, family)) in SOCKET_FAMILIES.iter().enumerate() {
                    let other = if i + 1 == families {
                        To::NoFamily
                    } else {
                        To::Next
                    };
                    let family = u32::try_from(*family).unwrap_or(u32::MAX);
                    insns.push(jump(BPF_JEQ_K, family, To::Allow, other));
                }
            }
            // fcntl(fd, F_SETSIG, …): the command is the second argument.
            insns.push(jump(BPF_JEQ_K, nr(libc::SYS_fcntl), To::Next, To::Skip(2)));
            insns.push(load(data_arg_low(1)));
            insns.push(jump(BPF_JEQ_K, F_SETSIG, To::Deny, To::Allow));
            for call in self_only_syscalls() {
                // Not this call: skip its argument checks (A still holds nr).
                let checks: u8 = if call.kind.is_some() { 4 } else { 2 };
                insns.push(jump(BPF_JEQ_K, nr(call.nr), To::Next, To::Skip(checks)));
                if let Some((arg, user)) = call.kind {
                    insns.push(load(data_arg_low(arg)));
                    insns.push(jump(BPF_JGE_K, user, To::Deny, To::Next));
                }
                // The kernel reads every id as an `int`: its low half decides.
                insns.push(load(data_arg_low(call.id_arg)));
                insns.push(jump(BPF_JEQ_K, 0, To::Allow, To::Deny));
            }
            let usr1 = u32::try_from(libc::SIGUSR1).unwrap_or(10);
            for (n, arg) in signal_syscalls() {
                // Not this call: skip its two-instruction argument check (A still holds nr).
                insns.push(jump(BPF_JEQ_K, nr(n), To::Next, To::Skip(2)));
                insns.push(load(data_arg_low(arg)));
                insns.push(jump(BPF_JEQ_K, usr1, To::Deny, To::Allow));
            }
            Ok(Filter {
                program: resolve(&insns)?,
            })
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            let _ = disk_budget;
            Err(format!(
                "no seccomp filter for the {} architecture",
                std::env::consts::ARCH
            ))
        }
    }

    /// Installs the filter on the calling thread (and so on everything it execs and forks).
    /// Returns the errno on failure.
    ///
    /// # Safety
    ///
    /// `no_new_privs` must be set (or the caller hold `CAP_SYS_ADMIN`). Meant for the forked
    /// child before exec: it only calls `prctl` with a pointer to a stack struct that points
    /// into `self`, and allocates nothing.
    pub unsafe fn install(&self) -> Result<(), i32> {
        let prog = libc::sock_fprog {
            len: u16::try_from(self.program.len()).unwrap_or(u16::MAX),
            filter: self.program.as_ptr().cast_mut(),
        };
        // SAFETY: `prog` points at `self.program`, alive for the call; the kernel copies it.
        let rc = unsafe {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
            )
        };
        if rc == 0 {
            // SAFETY: PR_GET_SECCOMP takes no pointer.
            let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
            if mode == 2 {
                return Ok(());
            }
            return Err(libc::EPERM);
        }
        Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL))
    }
}

/// Places the return instructions after `insns` and turns jump targets into offsets; `Err`
/// when a jump would not fit classic BPF's 8-bit offset.
fn resolve(insns: &[Insn]) -> Result<Vec<libc::sock_filter>, String> {
    let allow = insns.len();
    let deny = allow + 1;
    let foreign = allow + 2;
    let unsupported = allow + 3;
    let no_family = allow + 4;
    let offset = |at: usize, to: To| -> Result<u8, String> {
        let target = match to {
            To::Next => at + 1,
            To::Skip(n) => at + 1 + usize::from(n),
            To::Allow => allow,
            To::Deny => deny,
            To::NoSys => foreign,
            To::Unsupported => unsupported,
            To::NoFamily => no_family,
        };
        u8::try_from(target - at - 1)
            .map_err(|_| format!("seccomp: a jump of {} instructions", target - at - 1))
    };
    let mut program = Vec::with_capacity(insns.len() + 5);
    for (at, insn) in insns.iter().enumerate() {
        program.push(libc::sock_filter {
            code: insn.code,
            jt: offset(at, insn.jt)?,
            jf: offset(at, insn.jf)?,
            k: insn.k,
        });
    }
    let errno = |e: i32| SECCOMP_RET_ERRNO | u32::try_from(e).unwrap_or(1);
    for k in [
        SECCOMP_RET_ALLOW,
        errno(libc::EPERM),
        errno(libc::ENOSYS),
        errno(libc::EOPNOTSUPP),
        errno(libc::EAFNOSUPPORT),
    ] {
        program.push(libc::sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k,
        });
    }
    Ok(program)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `probe` in a forked child with the filter installed; its exit code.
    fn in_filtered_child(probe: fn() -> i32) -> i32 {
        in_child_with(&Filter::build(false).expect("filter"), probe)
    }

    /// Runs `probe` in a forked child with `filter` installed; its exit code.
    fn in_child_with(filter: &Filter, probe: fn() -> i32) -> i32 {
        // SAFETY: the child only makes raw system calls and `_exit`s; the test harness may have
        // other threads, but the child never allocates or takes a lock.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: child side: prctl, the probe's raw calls, _exit.
            unsafe {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    libc::_exit(100);
                }
                if filter.install().is_err() {
                    libc::_exit(101);
                }
                libc::_exit(probe());
            }
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "child status {status:#x}");
        libc::WEXITSTATUS(status)
    }

    fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    #[test]
    fn the_program_ends_with_its_five_returns_and_every_jump_lands_inside() {
        for disk_budget in [false, true] {
            let filter = Filter::build(disk_budget).unwrap();
            let n = filter.program.len();
            assert!(n < 128, "{n}");
            for (at, insn) in filter.program.iter().enumerate() {
                if insn.code == BPF_JEQ_K || insn.code == BPF_JGE_K {
                    assert!(at + 1 + usize::from(insn.jt) < n);
                    assert!(at + 1 + usize::from(insn.jf) < n);
                }
            }
            assert!(filter.program[n - 5..].iter().all(|i| i.code == BPF_RET_K));
        }
    }

    #[test]
    #[allow(non_snake_case)] // attack tests are named attack_<class>__<case>
    fn attack_egress__only_unix_inet_and_netlink_sockets_are_made() {
        fn probe() -> i32 {
            // SAFETY: raw socket calls; each descriptor made is closed.
            unsafe {
                for family in [
                    libc::AF_UNIX,
                    libc::AF_INET,
                    libc::AF_INET6,
                    libc::AF_NETLINK,
                ] {
                    let kind = if family == libc::AF_NETLINK {
                        libc::SOCK_RAW
                    } else {
                        libc::SOCK_STREAM
                    };
                    let fd = libc::socket(family, kind, 0);
                    if fd < 0 && errno() == libc::EAFNOSUPPORT {
                        return 1;
                    }
                    libc::close(fd);
                }
                let mut pair = [0; 2];
                if libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, pair.as_mut_ptr()) != 0 {
                    return 2;
                }
                for family in [
                    libc::AF_VSOCK,
                    libc::AF_PACKET,
                    libc::AF_ALG,
                    libc::AF_BLUETOOTH,
                ] {
                    if libc::socket(family, libc::SOCK_STREAM, 0) >= 0
                        || errno() != libc::EAFNOSUPPORT
                    {
                        return 3;
                    }
                }
                // The high half of the family argument changes nothing the kernel reads.
                let vsock = (1_i64 << 32) | i64::from(libc::AF_VSOCK);
                if libc::syscall(libc::SYS_socket, vsock, libc::SOCK_STREAM, 0) >= 0
                    || errno() != libc::EAFNOSUPPORT
                {
                    return 4;
                }
                if libc::socketpair(libc::AF_VSOCK, libc::SOCK_STREAM, 0, pair.as_mut_ptr()) == 0
                    || errno() != libc::EAFNOSUPPORT
                {
                    return 5;
                }
                0
            }
        }
        assert_eq!(in_filtered_child(probe), 0);
    }

    /// `fallocate` of 4 KiB on a memfd: 0 when it worked, 1 when it failed with
    /// `EOPNOTSUPP`, 2 otherwise.
    fn fallocate_probe() -> i32 {
        // SAFETY: raw calls on a descriptor of the child's own.
        unsafe {
            let fd = libc::syscall(libc::SYS_memfd_create, c"probe".as_ptr(), 0);
            let Ok(fd) = i32::try_from(fd) else { return 2 };
            match libc::fallocate(fd, 0, 0, 4096) {
                0 => 0,
                _ if errno() == libc::EOPNOTSUPP => 1,
                _ => 2,
            }
        }
    }

    #[test]
    fn with_a_disk_budget_fallocate_is_not_supported() {
        assert_eq!(
            in_child_with(&Filter::build(true).unwrap(), fallocate_probe),
            1
        );
        assert_eq!(
            in_child_with(&Filter::build(false).unwrap(), fallocate_probe),
            0
        );
    }

    #[test]
    fn ptrace_and_the_memory_and_fd_calls_are_refused() {
        fn probe() -> i32 {
            // SAFETY: raw system calls with integer arguments and null pointers.
            unsafe {
                let ppid = libc::getppid();
                if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) != -1 || errno() != libc::EPERM {
                    return 1;
                }
                let iov = libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                };
                if libc::process_vm_readv(ppid, &iov, 1, &iov, 1, 0) != -1 || errno() != libc::EPERM
                {
                    return 2;
                }
                if libc::process_vm_writev(ppid, &iov, 1, &iov, 1, 0) != -1
                    || errno() != libc::EPERM
                {
                    return 3;
                }
                if libc::syscall(libc::SYS_pidfd_getfd, 0, 1, 0) != -1 || errno() != libc::EPERM {
                    return 4;
                }
                // KEYCTL_GET_KEYRING_ID of the user keyring.
                if libc::syscall(libc::SYS_keyctl, 0, -4, 0) != -1 || errno() != libc::EPERM {
                    return 6;
                }
                if libc::fcntl(0, F_SETSIG as i32, libc::SIGUSR1) != -1 || errno() != libc::EPERM {
                    return 7;
                }
                // Other fcntl commands work.
                if libc::fcntl(0, libc::F_GETFD) < 0 && errno() != libc::EBADF {
                    return 8;
                }
                // Ordinary calls still work.
                if libc::getpid() <= 0 {
                    return 5;
                }
                0
            }
        }
        assert_eq!(in_filtered_child(probe), 0);
    }

    /// From a filtered child, every call of [`SELF_ONLY_SYSCALLS`] on its parent (a process of
    /// the same uid, as the supervisor is in the unprivileged mode) fails with `EPERM` and
    /// changes nothing, `setpriority` and `ioprio_set` on the whole user too, while the same
    /// calls on the child itself (id 0) and the read-only calls on the parent work.
    #[test]
    #[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
    fn attack_limits__calls_that_act_on_another_process_of_the_uid_are_refused_on_all_but_itself() {
        fn probe() -> i32 {
            // SAFETY: raw system calls on the parent and on ourselves, with pointers to stack
            // values that live for each call; nothing allocates.
            unsafe {
                let ppid = libc::getppid();
                let denied = |rc: libc::c_long| rc == -1 && errno() == libc::EPERM;
                let zero = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                let mut old = zero;
                if !denied(libc::syscall(
                    libc::SYS_prlimit64,
                    ppid,
                    libc::RLIMIT_FSIZE,
                    &zero as *const libc::rlimit,
                    std::ptr::null_mut::<libc::rlimit>(),
                )) {
                    return 1;
                }
                if libc::syscall(
                    libc::SYS_prlimit64,
                    0,
                    libc::RLIMIT_FSIZE,
                    std::ptr::null::<libc::rlimit>(),
                    &mut old as *mut libc::rlimit,
                ) != 0
                {
                    return 2;
                }
                // PRIO_PROCESS of the parent, PRIO_USER of our own uid (which holds the parent).
                if !denied(libc::syscall(libc::SYS_setpriority, 0, ppid, 19))
                    || !denied(libc::syscall(libc::SYS_setpriority, 2, 0, 19))
                {
                    return 3;
                }
                if libc::syscall(libc::SYS_setpriority, 0, 0, 1) != 0 {
                    return 4;
                }
                // IOPRIO_WHO_PROCESS of the parent, IOPRIO_WHO_USER; the idle class (3 << 13).
                if !denied(libc::syscall(libc::SYS_ioprio_set, 1, ppid, 3 << 13))
                    || !denied(libc::syscall(libc::SYS_ioprio_set, 3, 0, 3 << 13))
                {
                    return 5;
                }
                if libc::syscall(libc::SYS_ioprio_set, 1, 0, 3 << 13) != 0 {
                    return 6;
                }
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                let size = std::mem::size_of::<libc::cpu_set_t>();
                if libc::sched_getaffinity(ppid, size, &mut set) != 0 {
                    return 7;
                }
                if !denied(libc::syscall(
                    libc::SYS_sched_setaffinity,
                    ppid,
                    size,
                    &set as *const libc::cpu_set_t,
                )) {
                    return 8;
                }
                if libc::sched_setaffinity(0, size, &set) != 0 {
                    return 9;
                }
                let param = libc::sched_param { sched_priority: 0 };
                if !denied(libc::syscall(
                    libc::SYS_sched_setscheduler,
                    ppid,
                    libc::SCHED_IDLE,
                    &param as *const libc::sched_param,
                )) || !denied(libc::syscall(
                    libc::SYS_sched_setparam,
                    ppid,
                    &param as *const libc::sched_param,
                )) {
                    return 10;
                }
                // struct sched_attr's first field is its size; 48 bytes is SCHED_ATTR_SIZE_VER0.
                let attr = [48u32, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
                if !denied(libc::syscall(
                    libc::SYS_sched_setattr,
                    ppid,
                    attr.as_ptr(),
                    0,
                )) {
                    return 11;
                }
                let nodes: libc::c_ulong = 1;
                if !denied(libc::syscall(
                    libc::SYS_migrate_pages,
                    ppid,
                    64,
                    &nodes as *const libc::c_ulong,
                    &nodes as *const libc::c_ulong,
                )) || !denied(libc::syscall(
                    libc::SYS_move_pages,
                    ppid,
                    0,
                    std::ptr::null::<u8>(),
                    std::ptr::null::<u8>(),
                    std::ptr::null::<u8>(),
                    0,
                )) {
                    return 12;
                }
                if libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) != 0 {
                    return 13;
                }
                0
            }
        }
        // SAFETY: reads our own limit and priority.
        let (before, nice) = unsafe {
            let mut limit = std::mem::zeroed::<libc::rlimit>();
            libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit);
            (limit.rlim_cur, libc::getpriority(libc::PRIO_PROCESS, 0))
        };
        assert_eq!(in_filtered_child(probe), 0);
        // SAFETY: as above.
        let (after, nice_after, policy) = unsafe {
            let mut limit = std::mem::zeroed::<libc::rlimit>();
            libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit);
            (
                limit.rlim_cur,
                libc::getpriority(libc::PRIO_PROCESS, 0),
                libc::sched_getscheduler(0),
            )
        };
        assert_eq!((after, nice_after), (before, nice));
        assert_ne!(policy, libc::SCHED_IDLE);
    }

    /// Without the filter, the same uid may lower another process's limits: what the filter
    /// closes (this fails if the kernel ever adds a check of its own, which would make the
    /// attack test above prove nothing).
    #[test]
    fn without_the_filter_prlimit64_reaches_another_process_of_the_uid() {
        // SAFETY: a forked child that only makes a raw prlimit64 call on a sibling and exits.
        unsafe {
            let target = libc::fork();
            assert!(target >= 0);
            if target == 0 {
                libc::pause();
                libc::_exit(0);
            }
            let prober = libc::fork();
            assert!(prober >= 0);
            if prober == 0 {
                let limit = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                let rc = libc::syscall(
                    libc::SYS_prlimit64,
                    target,
                    libc::RLIMIT_CORE,
                    &limit as *const libc::rlimit,
                    std::ptr::null_mut::<libc::rlimit>(),
                );
                libc::_exit(if rc == 0 { 0 } else { 1 });
            }
            let mut status = 0;
            libc::waitpid(prober, &mut status, 0);
            libc::kill(target, libc::SIGKILL);
            libc::waitpid(target, std::ptr::null_mut(), 0);
            assert_eq!(libc::WEXITSTATUS(status), 0);
        }
    }

    /// Setting an extended attribute (an ACL, `user.*`) fails as on a file system without
    /// them, through every call, and `io_uring` (whose ring would set one unseen) as on a
    /// kernel without it; reading attributes still works.
    #[test]
    #[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
    fn attack_record__setting_an_acl_or_xattr_is_not_supported_and_io_uring_is_absent() {
        fn probe() -> i32 {
            // SAFETY: raw calls on a memfd of the child's own and on /tmp with C strings and
            // stack buffers that live for each call.
            unsafe {
                let fd = libc::syscall(libc::SYS_memfd_create, c"probe".as_ptr(), 0) as i32;
                let unsupported = |rc: libc::c_long| rc == -1 && errno() == libc::EOPNOTSUPP;
                let value = b"x";
                let ptr = value.as_ptr().cast::<libc::c_void>();
                if !unsupported(libc::syscall(
                    libc::SYS_fsetxattr,
                    fd,
                    c"user.x".as_ptr(),
                    ptr,
                    1,
                    0,
                )) || !unsupported(libc::syscall(
                    libc::SYS_setxattr,
                    c"/tmp".as_ptr(),
                    c"system.posix_acl_default".as_ptr(),
                    ptr,
                    1,
                    0,
                )) || !unsupported(libc::syscall(
                    libc::SYS_lsetxattr,
                    c"/tmp".as_ptr(),
                    c"user.x".as_ptr(),
                    ptr,
                    1,
                    0,
                )) || !unsupported(libc::syscall(
                    SYS_SETXATTRAT,
                    -100,
                    c"/tmp".as_ptr(),
                    0,
                    0,
                    0,
                    0,
                )) {
                    return 1;
                }
                let mut params = [0u8; 120];
                if libc::syscall(libc::SYS_io_uring_setup, 4, params.as_mut_ptr()) != -1
                    || errno() != libc::ENOSYS
                {
                    return 2;
                }
                let mut buf = [0u8; 256];
                let listed = libc::syscall(
                    libc::SYS_flistxattr,
                    fd,
                    buf.as_mut_ptr().cast::<libc::c_char>(),
                    buf.len(),
                );
                if listed < 0 {
                    return 3;
                }
                0
            }
        }
        assert_eq!(in_filtered_child(probe), 0);
    }

    #[test]
    fn sigusr1_is_refused_through_every_signal_call_and_other_signals_pass() {
        fn probe() -> i32 {
            // SAFETY: signals to ourselves; SIGUSR2 and SIGWINCH are blocked/ignored first so
            // delivering them does nothing.
            unsafe {
                let me = libc::getpid();
                libc::signal(libc::SIGWINCH, libc::SIG_IGN);
                if libc::kill(me, libc::SIGUSR1) != -1 || errno() != libc::EPERM {
                    return 1;
                }
                if libc::syscall(libc::SYS_tgkill, me, me, libc::SIGUSR1) != -1
                    || errno() != libc::EPERM
                {
                    return 2;
                }
                if libc::syscall(libc::SYS_tkill, me, libc::SIGUSR1) != -1 || errno() != libc::EPERM
                {
                    return 3;
                }
                if libc::syscall(libc::SYS_pidfd_send_signal, 0, libc::SIGUSR1, 0, 0) != -1
                    || errno() != libc::EPERM
                {
                    return 4;
                }
                if libc::kill(me, libc::SIGWINCH) != 0 || libc::kill(me, 0) != 0 {
                    return 5;
                }
                0
            }
        }
        assert_eq!(in_filtered_child(probe), 0);
    }
}
