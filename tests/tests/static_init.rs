//! The pitcrew-init that goes into sandbox images (`scripts/build-init`: release, built for
//! size, linked statically against glibc) does an iteration's whole work, end to end with the
//! local engine: it serves, verifies the plugin and the adapter, drops to the agent's uid under
//! Landlock and without capabilities, runs the agent and reports.
//!
//! Needs root, PID namespaces and the static build (`scripts/build-init`, which `.ci/run` runs
//! first; `PITCREW_STATIC_INIT` names another); skipped otherwise, or a failure with
//! `PITCREW_REQUIRE_E2E=1`.

use pitcrew_e2e::{iteration_dir, pitcrew_run, read_text, require_pid_namespaces, LocalFixture};
use pitcrew_test_support::prerequisite;
use std::path::PathBuf;

/// `PITCREW_STATIC_INIT`, else `<target>/<triple>/init/pitcrew-init` (scripts/build-init's).
fn static_init() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PITCREW_STATIC_INIT") {
        return Some(PathBuf::from(p));
    }
    let target = pitcrew_e2e::target_profile_dir().parent()?.to_path_buf();
    std::fs::read_dir(&target)
        .ok()?
        .flatten()
        .map(|e| e.path().join("init/pitcrew-init"))
        .find(|p| p.is_file())
}

/// Whether the ELF64 image `elf` has a `PT_INTERP` program header.
fn has_interpreter(elf: &[u8]) -> bool {
    assert_eq!(elf.get(..4), Some(&b"\x7fELF"[..]), "not an ELF file");
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap_or_default()) as usize;
    let (size, count) = (u16_at(0x36), u16_at(0x38));
    (0..count).any(|i| {
        let at = phoff + i * size;
        u32::from_le_bytes(elf[at..at + 4].try_into().unwrap_or_default()) == 3
    })
}

#[test]
fn the_static_init_of_the_images_runs_and_confines_an_iteration() {
    if !require_pid_namespaces() {
        return;
    }
    let init = static_init();
    if !prerequisite(
        init.is_some(),
        "needs the static pitcrew-init of scripts/build-init (run it first)",
    ) {
        return;
    }
    let init = init.unwrap_or_default();
    // Linked statically: no program interpreter (PT_INTERP) for the image to provide.
    let elf = std::fs::read(&init).expect("read pitcrew-init");
    assert!(
        !has_interpreter(&elf),
        "{} asks for a dynamic loader: not the static build",
        init.display()
    );
    let fixture = LocalFixture::new(
        "id -u\ngrep -E '^CapEff' /proc/self/status\necho written > /etc/pitcrew-static-probe 2>/dev/null || echo refused",
        2,
        "",
        false,
    );
    let doc = pitcrew_run(
        &fixture.harness,
        &fixture.state,
        &["--supervisor", init.to_str().unwrap_or_default()],
        &[],
    );
    assert_eq!(
        doc["iterations"].as_array().map(Vec::len),
        Some(2),
        "{doc:#}"
    );
    for n in 1..=2 {
        let dir = iteration_dir(&doc, n);
        let record: serde_json::Value =
            serde_json::from_str(&read_text(&dir.join("result.json"))).expect("record");
        assert_eq!(record["exit_code"], 0, "{record:#}");
        assert_eq!(record["supervisor"]["pid1"], true, "{record:#}");
        assert_eq!(
            record["verification"]["trees"][0]["status"], "ok",
            "{record:#}"
        );
        let out = read_text(&dir.join("output.jsonl"));
        let mut lines = out.lines();
        let uid: u32 = lines
            .next()
            .and_then(|l| l.trim().parse().ok())
            .expect("uid");
        assert_ne!(uid, 0, "the agent ran as root: {out}");
        assert_eq!(lines.next(), Some("CapEff:\t0000000000000000"), "{out}");
        assert_eq!(lines.next(), Some("refused"), "{out}");
    }
    assert!(!std::path::Path::new("/etc/pitcrew-static-probe").exists());
}
