use super::html::{bins, duration, esc, Bin};
use super::page_of;
use pitcrew_core::environment::{EnvSource, RemovedVar};
use pitcrew_core::result::{
    AgentRecord, IterationResult, SupervisorInfo, SupervisorMode, UsageRecord, UsageSource,
};
use std::path::Path;

const HOSTILE: &str = "<script>alert(\"x\")</script>' onmouseover='x";

fn record(n: u32, cost: Option<f64>) -> IterationResult {
    let mut r = IterationResult::new(
        n,
        SupervisorInfo {
            pid1: true,
            mode: SupervisorMode::Pid1,
            degraded_reason: None,
        },
    );
    r.exit_code = 1;
    r.meaning = HOSTILE.into();
    r.reason = Some(format!("judge: pi-error: {HOSTILE}"));
    r.steps.agent_ms = 1500;
    r.steps.verify_ms = 20;
    r.env.removed.push(RemovedVar {
        name: format!("NODE_OPTIONS{HOSTILE}"),
        source: EnvSource::Plugin(HOSTILE.into()),
        rule: HOSTILE.into(),
    });
    r.agent = Some(AgentRecord {
        argv0: "/bin/sh".into(),
        argv: vec!["/bin/sh".into(), "-c".into(), HOSTILE.into()],
        prompt: None,
        pid: 2,
        timed_out: false,
        forwarded_signals: vec![HOSTILE.into()],
        output: Vec::new(),
    });
    r.usage = cost.map(|c| UsageRecord {
        input_tokens: 1000,
        output_tokens: 200,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        cost_usd: Some(c),
        source: UsageSource::PiJson,
    });
    r
}

fn write_run(dir: &Path, records: &[IterationResult]) {
    std::fs::create_dir_all(dir).unwrap();
    let rows: Vec<_> = records
        .iter()
        .map(|r| serde_json::json!({"iteration": r.iteration, "duration_ms": 1600, "validation_exit": 1}))
        .collect();
    let doc = serde_json::json!({
        "run_id": format!("run{HOSTILE}"), "harness": HOSTILE, "engine": "local",
        "sandbox": HOSTILE, "kept": false, "run_dir": dir, "stopped": "iterations",
        "exit_code": 1, "iterations": rows,
    });
    std::fs::write(dir.join("run.json"), doc.to_string()).unwrap();
    for r in records {
        let it = dir.join(format!("iteration-{}", r.iteration));
        std::fs::create_dir_all(&it).unwrap();
        std::fs::write(it.join("result.json"), serde_json::to_vec(r).unwrap()).unwrap();
    }
}

/// Nothing of the records reaches the page as markup: the page has no script at all, and
/// every hostile string is there escaped.
fn assert_inert(page: &str) {
    assert!(!page.to_lowercase().contains("<script"), "{page}");
    assert!(!page.contains("' onmouseover='"), "{page}");
    assert!(
        page.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&#39; onmouseover=&#39;x"),
        "{page}"
    );
}

#[test]
fn hostile_strings_in_a_run_record_come_out_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    write_run(&dir, &[record(1, Some(0.25)), record(2, None)]);
    let page = page_of(&dir).unwrap();
    assert_inert(&page);
    // Both iterations, their steps, the exit code's own meaning and the usage.
    assert!(page.contains("id=\"iteration-1\"") && page.contains("id=\"iteration-2\""));
    assert!(page.contains("agent run"), "{page}");
    assert!(page.contains("agent exited 1"), "{page}");
    assert!(page.contains("1000 in / 200 out tokens, $0.25"), "{page}");
    assert!(page.contains("validation"), "{page}");
}

#[test]
fn hostile_strings_in_a_job_record_come_out_escaped_and_costs_add_up() {
    let tmp = tempfile::tempdir().unwrap();
    let batch = tmp.path().join("jobs.batch");
    for (id, status, cost) in [("a", "succeeded", 0.25), ("b", "failed", 0.5)] {
        let job = batch.join(id);
        let run = job.join("records").join(format!("run-{id}"));
        write_run(&run, &[record(1, Some(cost))]);
        let doc = serde_json::json!({
            "id": id, "status": status, "exit_code": 1,
            // Reported where it ran; found below the job's own records/.
            "run_dir": format!("/elsewhere/run-{id}"),
            "error": HOSTILE,
            "attempts": [{"attempt": 1, "end": "completed", "exit_code": 1,
                          "error": HOSTILE, "sandbox": HOSTILE,
                          "run_dir": format!("/elsewhere/run-{id}"), "log": "x", "duration_ms": 1234}],
        });
        std::fs::write(job.join("job.json"), doc.to_string()).unwrap();
    }
    let page = page_of(&batch).unwrap();
    assert_inert(&page);
    assert!(
        page.contains("id=\"total-cost\">2000 in / 400 out tokens, $0.75<"),
        "{page}"
    );
    assert!(page.contains("<svg class=\"histogram\""), "{page}");
    assert!(
        page.contains("class=\"job job-succeeded\"") && page.contains("class=\"job job-failed\"")
    );
    assert!(page.contains("#only-failed:target"), "{page}");
}

#[test]
fn bad_input_names_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let e = format!("{:#}", page_of(&missing).unwrap_err());
    assert!(e.contains(&missing.display().to_string()), "{e}");

    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e = format!("{:#}", page_of(&empty).unwrap_err());
    assert!(
        e.contains(&empty.display().to_string()) && e.contains("neither a run"),
        "{e}"
    );

    let run = tmp.path().join("run");
    write_run(&run, &[record(1, None)]);
    let result = run.join("iteration-1/result.json");
    std::fs::write(&result, "{\"version\": 1, \"iteration\": ").unwrap();
    let e = format!("{:#}", page_of(&run).unwrap_err());
    assert!(e.contains(&result.display().to_string()), "{e}");
    assert!(e.contains("not a readable record"), "{e}");
}

#[test]
fn esc_leaves_no_markup_and_shows_controls() {
    assert_eq!(esc("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&#39;");
    assert_eq!(esc("x\u{202e}y\x1b"), "x\\u{202e}y\\x1b");
}

#[test]
fn bins_cover_every_value_once_from_the_smallest_to_the_largest() {
    assert_eq!(bins(&[], 10), Vec::<Bin>::new());
    let b = bins(&[100, 105, 110, 199, 200], 4);
    assert_eq!(b.len(), 4);
    assert_eq!(b.iter().map(|b| b.count).sum::<usize>(), 5);
    assert_eq!(
        b[0],
        Bin {
            from: 100,
            to: 125,
            count: 3
        }
    );
    assert_eq!((b[3].to, b[3].count), (200, 2));
    assert_eq!(
        bins(&[7, 7], 3),
        vec![Bin {
            from: 7,
            to: 8,
            count: 2
        }]
    );
}

#[test]
fn durations_read_as_people_read_them() {
    assert_eq!(duration(840), "840 ms");
    assert_eq!(duration(12_345), "12.35 s");
    assert_eq!(duration(185_000), "3 min 05 s");
}
