//! `pitcrew report` on a real run directory and a real batch directory (local engine,
//! `command` runtime), opened in Debian's headless Chromium: the page renders the iterations
//! and the jobs, the browser's console says nothing (no script error, no blocked load: the
//! page's policy forbids every fetch and script, so any would be logged), and the screenshots
//! are kept as artifacts under `target/report-screenshots/`.
//!
//! Needs root and PID namespaces, and `chromium` (`apt-get install chromium`); skipped
//! otherwise, or a failure with `PITCREW_REQUIRE_E2E=1`.

use pitcrew_e2e::{binary, pitcrew_run, prerequisite, require_pid_namespaces, LocalFixture};
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The agent: prints markup (the report must show it as text), leaves a background process
/// for the final reap, and fails when `TASK` is `fail`.
const AGENT: &str = r#"echo "<script>alert('agent')</script> task ${TASK:-none}"
(sleep 600 &)
[ "${TASK:-}" != fail ]"#;

/// The browser, when there is one on `PATH`.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("chromium"))
        .find(|p| p.is_file())
}

/// Where the screenshots are kept: `target/report-screenshots/`.
fn artifacts() -> PathBuf {
    let dir = pitcrew_e2e::target_profile_dir()
        .parent()
        .expect("target/")
        .join("report-screenshots");
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// `pitcrew report ARGS --json`: the path it wrote.
fn report(args: &[&std::ffi::OsStr]) -> PathBuf {
    let out = Command::new(binary("pitcrew"))
        .arg("report")
        .args(args)
        .arg("--json")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pitcrew report {args:?}: {stderr}");
    let doc: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    PathBuf::from(doc["path"].as_str().expect("a path"))
}

/// What headless Chromium made of `page`: the rendered DOM, after the screenshot it saved to
/// `png`. Fails on anything the page's console said.
fn render(browser: &Path, page: &Path, png: &Path, profile: &Path) -> String {
    let url = format!("file://{}", fs::canonicalize(page).unwrap().display());
    let run = |extra: &[&str]| {
        let out = Command::new(browser)
            .args([
                "--headless",
                "--disable-gpu",
                "--no-sandbox",
                "--window-size=1280,2000",
            ])
            .args(["--enable-logging=stderr", "--v=0", "--no-first-run"])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(extra)
            .arg(&url)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", browser.display()));
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "chromium {extra:?} {url}: {stderr}");
        // Every console message: the page runs no script, so any is an error or a blocked load.
        let console: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught"))
            .collect();
        assert!(console.is_empty(), "{url}: the console said {console:#?}");
        out.stdout
    };
    let _ = fs::remove_file(png);
    run(&[&format!("--screenshot={}", png.display())]);
    let bytes = fs::read(png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
    assert!(
        bytes.len() > 1000,
        "{}: {} bytes",
        png.display(),
        bytes.len()
    );
    assert_eq!(
        &bytes[..8],
        b"\x89PNG\r\n\x1a\n",
        "{}: not a PNG",
        png.display()
    );
    String::from_utf8(run(&["--dump-dom"])).unwrap()
}

#[test]
fn a_run_and_a_batch_report_render_in_a_headless_browser() {
    if !require_pid_namespaces() {
        return;
    }
    let browser = chromium();
    if !prerequisite(
        browser.is_some(),
        "needs Debian's chromium on PATH (apt-get install chromium)",
    ) {
        return;
    }
    let browser = browser.unwrap();
    let fx = LocalFixture::new(AGENT, 2, "dotenv: .env\n", false);
    fs::write(
        fx.root.join("workspace/.env"),
        "HTTPS_PROXY=http://proxy:3128\nnot an assignment\n",
    )
    .unwrap();
    let profile = tempfile::tempdir().unwrap();
    let shots = artifacts();

    // A run: two iterations, each with a background process reaped and `.env` lines refused.
    let doc = pitcrew_run(&fx.harness, &fx.state, &[], &[]);
    let run_dir = PathBuf::from(doc["run_dir"].as_str().unwrap());
    let page = report(&[run_dir.as_os_str()]);
    assert_eq!(page, run_dir.join("report.html"));
    let html = fs::read_to_string(&page).unwrap();
    assert!(!html.contains("<script"), "{html}");
    assert!(
        html.contains("&lt;script&gt;alert(&#39;agent&#39;)"),
        "{html}"
    );
    let dom = render(&browser, &page, &shots.join("run.png"), profile.path());
    for n in 1..=2 {
        assert!(
            dom.contains(&format!("id=\"row-{n}\"")),
            "iteration {n} row: {dom}"
        );
        assert!(
            dom.contains(&format!("id=\"iteration-{n}\"")),
            "iteration {n}: {dom}"
        );
    }
    assert_eq!(dom.matches("class=\"iteration-row\"").count(), 2, "{dom}");
    assert!(dom.contains("HTTPS_PROXY"), "the refused .env line: {dom}");
    assert!(
        dom.contains("1 after the agent"),
        "the reaped background process: {dom}"
    );
    assert!(!dom.contains("<script"), "{dom}");

    // A batch: one job succeeds, one fails, one never runs; its report written elsewhere.
    fs::write(
        fx.root.join("jobs.jsonl"),
        "{\"id\":\"ok\",\"harness\":\"harness.yaml\",\"iterations\":1}\n\
         {\"id\":\"fails\",\"harness\":\"harness.yaml\",\"iterations\":1,\"env\":{\"TASK\":\"fail\"}}\n\
         {\"id\":\"invalid\",\"harness\":\"missing.yaml\"}\n",
    )
    .unwrap();
    let batch_dir = fx.root.join("jobs.batch");
    let out = Command::new(binary("pitcrew"))
        .arg("batch")
        .arg(fx.root.join("jobs.jsonl"))
        .args([
            "--engine",
            "local",
            "--json",
            "--concurrency",
            "2",
            "--state-dir",
        ])
        .arg(&fx.state)
        .arg("--out")
        .arg(&batch_dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let target = fx.root.join("batch-report.html");
    let page = report(&[
        batch_dir.as_os_str(),
        "--output".as_ref(),
        target.as_os_str(),
    ]);
    assert_eq!(page, target);
    assert!(!batch_dir.join("report.html").exists());
    let dom = render(&browser, &page, &shots.join("batch.png"), profile.path());
    for (id, status) in [
        ("ok", "succeeded"),
        ("fails", "failed"),
        ("invalid", "invalid"),
    ] {
        let row = format!("<tr class=\"job job-{status}\"><td><code>{id}</code>");
        assert!(dom.contains(&row), "{row}: {dom}");
    }
    assert!(dom.contains("<svg class=\"histogram\""), "{dom}");
    assert!(dom.contains("id=\"total-cost\""), "{dom}");
}

#[test]
fn a_directory_that_is_neither_is_refused_with_its_path() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(binary("pitcrew"))
        .arg("report")
        .arg(tmp.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&tmp.path().display().to_string()),
        "{stderr}"
    );
    assert!(stderr.contains("neither a run directory"), "{stderr}");
    assert!(!tmp.path().join("report.html").exists());
}
