//! The pages. Every string from a record goes through [`esc`]; everything else written here is
//! pitcrew's own text, numbers, and class names from fixed lists.

use super::html::{self, dollars, duration, esc};
use super::load::{spend_of, Batch, Iteration, Job, Run, Spend};
use crate::commands::batch::Status;
use crate::report::{record_duration_ms, usage_cell, verification_summary};
use pitcrew_core::exit_code;
use pitcrew_core::result::IterationResult;
use pitcrew_core::verify::CheckStatus;
use std::fmt::Write as _;

/// The page around `body`, titled `title` (escaped here), with `style` (pitcrew's own rules)
/// after the common style sheet.
fn page(title: &str, style: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
         <title>{}</title><style>{}{style}</style></head>\n<body>\n{body}\n<p class=\"muted\">Written by pitcrew {} from the records on disk.</p>\n</body></html>\n",
        esc(title),
        html::STYLE,
        env!("CARGO_PKG_VERSION"),
    )
}

/// The timeline's steps, in order: (class, label).
const STEPS: [(&str, &str); 6] = [
    ("s-reap", "reap"),
    ("s-verify", "verify"),
    ("s-env", "environment"),
    ("s-launch", "confine and launch"),
    ("s-run", "agent run"),
    ("s-final", "final reap and judge"),
];

/// The timeline steps of a record: (class, label, milliseconds).
fn steps(r: &IterationResult) -> impl Iterator<Item = (&'static str, &'static str, u64)> {
    let s = &r.steps;
    let ms = [
        s.reap_ms,
        s.verify_ms,
        s.env_ms,
        s.confine_launch_ms,
        s.agent_ms,
        s.final_reap_ms,
    ];
    STEPS
        .into_iter()
        .zip(ms)
        .map(|((class, label), ms)| (class, label, ms))
}

/// A bar of `r`'s steps, as wide as its share of `longest` (milliseconds).
fn timeline_bar(r: &IterationResult, longest: u64) -> String {
    let total = record_duration_ms(r);
    let share = if longest == 0 {
        100.0
    } else {
        (total as f64 / longest as f64 * 100.0).clamp(1.0, 100.0)
    };
    let mut bar = format!("<div class=\"bar\" style=\"width:{share:.1}%\">");
    for (class, label, ms) in steps(r) {
        if ms == 0 {
            continue;
        }
        let w = ms as f64 / total.max(1) as f64 * 100.0;
        let _ = write!(
            bar,
            "<span class=\"{class}\" style=\"width:{w:.2}%\" title=\"{label}: {}\"></span>",
            duration(ms)
        );
    }
    bar.push_str("</div>");
    bar
}

fn legend() -> String {
    let mut s = String::from("<p class=\"legend\">");
    for (class, label) in STEPS {
        let _ = write!(s, "<span><i class=\"{class}\"></i>{label}</span>");
    }
    s.push_str("</p>");
    s
}

/// `code meaning`, coloured, with the meaning pitcrew gives the code (not the record's text).
fn exit_cell(code: i32) -> String {
    let class = if code == 0 { "ok" } else { "bad" };
    format!(
        "<span class=\"{class}\">{code}</span> {}",
        esc(&exit_code::meaning(code))
    )
}

fn spend_text(s: &Spend) -> String {
    if !s.has_usage {
        return "none reported".into();
    }
    let mut t = format!("{} in / {} out tokens", s.input_tokens, s.output_tokens);
    if s.has_cost {
        let _ = write!(t, ", {}", dollars(s.cost_usd));
    }
    t
}

/// The host's duration of an iteration (`run.json`), else the record's step sum.
fn iteration_ms(it: &Iteration) -> u64 {
    it.host
        .as_ref()
        .and_then(|h| h["duration_ms"].as_u64())
        .unwrap_or_else(|| record_duration_ms(&it.record))
}

/// The page of a run directory.
pub fn run_page(run: &Run) -> String {
    let title = match &run.doc {
        Some(d) => format!("pitcrew run {}", d.run_id),
        None => format!("pitcrew run {}", run.dir.display()),
    };
    let mut b = format!("<h1>{}</h1>\n<dl class=\"facts\">", esc(&title));
    let mut fact = |k: &str, v: String| {
        let _ = write!(b, "<dt>{k}</dt><dd>{v}</dd>");
    };
    fact(
        "directory",
        format!("<code>{}</code>", esc(&run.dir.display().to_string())),
    );
    if let Some(d) = &run.doc {
        fact("harness", format!("<code>{}</code>", esc(&d.harness)));
        fact("engine", esc(&d.engine));
        fact(
            "sandbox",
            format!(
                "<code>{}</code>{}",
                esc(&d.sandbox),
                if d.kept { " (kept)" } else { "" }
            ),
        );
        let stopped = serde_json::to_value(d.stopped).ok();
        let stopped = stopped.as_ref().and_then(|v| v.as_str()).unwrap_or("?");
        fact("stopped", esc(stopped));
        fact("pitcrew run exit", exit_cell(i32::from(d.exit_code)));
    } else {
        fact(
            "run.json",
            "absent (iterations read from their records)".into(),
        );
    }
    let total: u64 = run.iterations.iter().map(iteration_ms).sum();
    fact(
        "iterations",
        format!("{} in {}", run.iterations.len(), duration(total)),
    );
    fact("tokens and cost", esc(&spend_text(&spend_of(run))));
    b.push_str("</dl>\n");
    b.push_str(&iterations_table(run));
    for it in &run.iterations {
        b.push_str(&iteration_section(it));
    }
    page(&title, "", &b)
}

/// The overview: one row per iteration with its timeline bar.
fn iterations_table(run: &Run) -> String {
    let longest = run
        .iterations
        .iter()
        .map(|it| record_duration_ms(&it.record))
        .max()
        .unwrap_or(0);
    let mut t = String::from(
        "<h2>Iterations</h2>\n<table id=\"iterations\"><thead><tr><th class=\"num\">#</th><th>exit</th>\
         <th class=\"num\">duration</th><th>verified</th><th class=\"num\" title=\"before verification / after the agent\">reaped</th>\
         <th>env removed or refused</th><th>tokens</th><th>timeline</th></tr></thead><tbody>",
    );
    for it in &run.iterations {
        let r = &it.record;
        let (verified, _, _) = verification_summary(r.verification.as_ref());
        let dropped = r.env.removed.len() + r.env.dotenv_refused.len();
        let _ = write!(
            t,
            "<tr class=\"iteration-row\" id=\"row-{n}\"><td class=\"num\"><a href=\"#iteration-{n}\">{n}</a></td>\
             <td>{}</td><td class=\"num\">{}</td><td><span class=\"{}\">{}</span></td>\
             <td class=\"num\">{}/{}</td><td class=\"num\">{dropped}</td><td>{}</td><td style=\"min-width:320px\">{}</td></tr>",
            exit_cell(r.exit_code),
            duration(iteration_ms(it)),
            if verified { "ok" } else { "bad" },
            if verified { "ok" } else { "drift" },
            r.reaped.before,
            r.reaped.after,
            esc(&usage_cell(r.usage.as_ref())),
            timeline_bar(r, longest),
            n = r.iteration,
        );
    }
    t.push_str("</tbody></table>\n");
    t.push_str(&legend());
    t
}

/// One iteration in full.
fn iteration_section(it: &Iteration) -> String {
    let r = &it.record;
    let n = r.iteration;
    let mut s = format!(
        "<section class=\"iteration\" id=\"iteration-{n}\"><h2>Iteration {n}</h2><dl class=\"facts\">"
    );
    let mut fact = |k: &str, v: String| {
        let _ = write!(s, "<dt>{k}</dt><dd>{v}</dd>");
    };
    fact("exit", exit_cell(r.exit_code));
    if let Some(reason) = &r.reason {
        fact("reason", format!("<code>{}</code>", esc(reason)));
    }
    if let Some(signal) = &r.signal {
        fact("signal", esc(signal));
    }
    if let Some(v) = it.host.as_ref().and_then(|h| h["validation_exit"].as_i64()) {
        let class = if v == 0 { "ok" } else { "bad" };
        fact(
            "validation",
            format!("<span class=\"{class}\">exit {v}</span>"),
        );
    }
    fact("duration", duration(iteration_ms(it)));
    fact(
        "supervisor",
        format!(
            "{}{}",
            r.supervisor.mode.name(),
            r.supervisor
                .degraded_reason
                .as_ref()
                .map(|d| format!(" ({})", esc(d)))
                .unwrap_or_default()
        ),
    );
    fact(
        "record",
        format!("<code>{}</code>", esc(&it.dir.display().to_string())),
    );
    s.push_str("</dl>");
    s.push_str(&steps_table(r));
    s.push_str(&verification_block(r));
    s.push_str(&reaped_block(r));
    s.push_str(&env_block(r));
    s.push_str(&usage_block(r));
    s.push_str(&agent_block(r));
    s.push_str("</section>\n");
    s
}

fn steps_table(r: &IterationResult) -> String {
    let total = record_duration_ms(r);
    let mut t = String::from(
        "<h3>Steps</h3><table class=\"steps\"><thead><tr><th>step</th><th class=\"num\">duration</th>\
         <th class=\"num\">share</th></tr></thead><tbody>",
    );
    for (class, label, ms) in steps(r) {
        let share = if total == 0 {
            0.0
        } else {
            ms as f64 / total as f64 * 100.0
        };
        let _ = write!(
            t,
            "<tr><td><i class=\"{class}\" style=\"display:inline-block;width:10px;height:10px;margin-right:6px\"></i>{label}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{share:.1}%</td></tr>",
            duration(ms)
        );
    }
    let judged = match &r.reason {
        Some(reason) if reason.starts_with("judge:") => {
            format!("<span class=\"bad\">{}</span>", esc(reason))
        }
        _ if r.agent.is_some() => {
            "no failure found in the agent's report (or not judged: command runtime)".into()
        }
        _ => "not reached".into(),
    };
    let _ = write!(
        t,
        "<tr><td>total</td><td class=\"num\">{}</td><td></td></tr></tbody></table><p>judge: {judged}</p>",
        duration(total)
    );
    t
}

/// A check's status as the record spells it (`ok`, `drifted`, `missing`, `refused`).
fn status_text(status: CheckStatus) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

fn status_class(status: CheckStatus) -> &'static str {
    if status == CheckStatus::Ok {
        "ok"
    } else {
        "bad"
    }
}

fn verification_block(r: &IterationResult) -> String {
    let (verified, text, _) = verification_summary(r.verification.as_ref());
    let mut s = format!(
        "<h3>Verification</h3><p class=\"{}\">{}</p>",
        if verified { "ok" } else { "bad" },
        esc(&text)
    );
    let Some(v) = &r.verification else {
        return s;
    };
    if !v.trees.is_empty() || !v.files.is_empty() {
        s.push_str("<table class=\"pins\"><thead><tr><th>pin</th><th>role</th><th>status</th><th>drift</th></tr></thead><tbody>");
        for t in &v.trees {
            let mut drift = String::new();
            if let Some(d) = &t.drift {
                for (k, list) in [
                    ("changed", &d.changed),
                    ("added", &d.added),
                    ("removed", &d.removed),
                ] {
                    if !list.is_empty() {
                        let _ = write!(drift, "{k}: <code>{}</code> ", esc(&list.join(", ")));
                    }
                }
                if d.left_out > 0 {
                    let _ = write!(drift, "(+{} more)", d.left_out);
                }
            }
            if let Some(e) = &t.error {
                let _ = write!(drift, "{}", esc(e));
            }
            let _ = write!(
                s,
                "<tr><td>{} <code>{}</code></td><td>{}</td><td class=\"{}\">{}</td><td>{drift}</td></tr>",
                esc(&t.name),
                esc(&t.path),
                esc(t.role.as_str()),
                status_class(t.status),
                status_text(t.status),
            );
        }
        for f in &v.files {
            let _ = write!(
                s,
                "<tr><td><code>{}</code></td><td>{}</td><td class=\"{}\">{}</td><td>{}</td></tr>",
                esc(&f.path),
                esc(f.role.as_str()),
                status_class(f.status),
                status_text(f.status),
                f.error.as_deref().map(esc).unwrap_or_default(),
            );
        }
        s.push_str("</tbody></table>");
    }
    let a = &v.agent;
    let _ = write!(
        s,
        "<p>agent binary <code>{}</code>{}{}</p>",
        esc(a.resolved.as_deref().unwrap_or(&a.requested)),
        a.version
            .as_deref()
            .map(|v| format!(" version {}", esc(v)))
            .unwrap_or_default(),
        a.failure
            .as_ref()
            .map(|f| format!(" <span class=\"bad\">{}</span>", esc(&f.reason)))
            .unwrap_or_default(),
    );
    s
}

fn reaped_block(r: &IterationResult) -> String {
    let mut s = format!(
        "<h3>Processes reaped</h3><p>{} before verification, {} after the agent{}</p>",
        r.reaped.before,
        r.reaped.after,
        if r.reaped.remaining_after > 0 {
            format!(
                ", <span class=\"bad\">{} still present</span>",
                r.reaped.remaining_after
            )
        } else {
            String::new()
        }
    );
    let resets = [
        ("config directory", &r.config_reset),
        ("HOME", &r.home_reset),
        ("TMPDIR", &r.tmp_reset),
        ("output/", &r.output_reset),
    ];
    for (what, reset) in resets {
        if let Some(reset) = reset {
            let _ = write!(
                s,
                "<p>{what}: {} left by an earlier agent removed{}</p>",
                reset.removed,
                if reset.paths.is_empty() {
                    String::new()
                } else {
                    format!(" (<code>{}</code>)", esc(&reset.paths.join(", ")))
                }
            );
        }
    }
    s
}

fn env_block(r: &IterationResult) -> String {
    let env = &r.env;
    if env.removed.is_empty() && env.dotenv_refused.is_empty() {
        return "<h3>Environment</h3><p>nothing removed or refused</p>".into();
    }
    let mut s = String::from(
        "<h3>Environment</h3><table class=\"env\"><thead><tr><th>name</th><th>what</th><th>why</th></tr></thead><tbody>",
    );
    for v in &env.removed {
        let _ = write!(
            s,
            "<tr><td><code>{}</code></td><td>removed (set by {})</td><td>{}</td></tr>",
            esc(&v.name),
            esc(&v.source.to_string()),
            esc(&v.rule)
        );
    }
    for v in &env.dotenv_refused {
        let _ = write!(
            s,
            "<tr><td><code>{}</code></td><td>refused (.env line {})</td><td>{}</td></tr>",
            esc(v.name.as_deref().unwrap_or("-")),
            v.line,
            esc(&v.reason)
        );
    }
    s.push_str("</tbody></table>");
    s
}

fn usage_block(r: &IterationResult) -> String {
    let Some(u) = &r.usage else {
        return "<h3>Tokens and cost</h3><p>none reported (the runtime said nothing of them, or a <code>command</code> runtime)</p>".into();
    };
    format!(
        "<h3>Tokens and cost</h3><table><tbody><tr><td>input</td><td class=\"num\">{}</td></tr>\
         <tr><td>output</td><td class=\"num\">{}</td></tr><tr><td>cache read</td><td class=\"num\">{}</td></tr>\
         <tr><td>cache write</td><td class=\"num\">{}</td></tr><tr><td>cost</td><td class=\"num\">{}</td></tr></tbody></table>",
        u.input_tokens,
        u.output_tokens,
        u.cache_read_tokens,
        u.cache_write_tokens,
        u.cost_usd.map(dollars).unwrap_or_else(|| "not said".into()),
    )
}

fn agent_block(r: &IterationResult) -> String {
    let Some(a) = &r.agent else {
        return "<h3>Agent</h3><p>not launched</p>".into();
    };
    let argv = if a.argv.is_empty() {
        esc(&a.argv0)
    } else {
        a.argv.iter().map(|x| esc(x)).collect::<Vec<_>>().join(" ")
    };
    let mut s = format!("<h3>Agent</h3><p><code>{argv}</code></p><p>");
    if a.timed_out {
        s.push_str("<span class=\"bad\">timed out</span>; ");
    }
    if !a.forwarded_signals.is_empty() {
        let _ = write!(
            s,
            "signals forwarded: {}; ",
            esc(&a.forwarded_signals.join(", "))
        );
    }
    for o in &a.output {
        let _ = write!(
            s,
            "{}: {} bytes kept{}{}; ",
            esc(&o.stream),
            o.kept,
            if o.dropped > 0 {
                format!(", {} dropped", o.dropped)
            } else {
                String::new()
            },
            if o.complete { "" } else { ", incomplete" }
        );
    }
    s.push_str("</p>");
    s
}

/// A status's name as the records spell it.
fn status_name(status: Status) -> &'static str {
    match status {
        Status::Succeeded => "succeeded",
        Status::Failed => "failed",
        Status::Infrastructure => "infrastructure",
        Status::Cancelled => "cancelled",
        Status::Invalid => "invalid",
    }
}

const STATUSES: [Status; 5] = [
    Status::Succeeded,
    Status::Failed,
    Status::Infrastructure,
    Status::Cancelled,
    Status::Invalid,
];

fn job_ms(job: &Job) -> u64 {
    job.record
        .attempts
        .iter()
        .map(|a| a.duration_ms)
        .fold(0, u64::saturating_add)
}

/// The status filters: a link per status to an anchor before the table, and one rule per
/// status that hides the other rows while its anchor is the page's target (no script; the
/// filter is part of the address, `report.html#only-failed`).
fn filters(jobs: &[Job]) -> (String, String) {
    let mut css = String::new();
    let mut anchors = String::new();
    let mut links = format!(
        "<p class=\"filters\">show: <a href=\"#jobs\">all ({})</a>",
        jobs.len()
    );
    for status in STATUSES {
        let name = status_name(status);
        let count = jobs.iter().filter(|j| j.record.status == status).count();
        let _ = write!(anchors, "<span id=\"only-{name}\"></span>");
        let _ = write!(
            links,
            " <a href=\"#only-{name}\" class=\"filter-{name}\">{name} ({count})</a>"
        );
        let _ = writeln!(
            css,
            "#only-{name}:target ~ table#jobs tbody tr:not(.job-{name}) {{ display: none; }}"
        );
        let _ = writeln!(
            css,
            "#only-{name}:target ~ .filters a.filter-{name} {{ font-weight: 700; text-decoration: none; color: inherit; }}"
        );
    }
    links.push_str("</p>");
    (format!("{anchors}{links}"), css)
}

/// The page of a batch directory.
pub fn batch_page(batch: &Batch) -> String {
    let title = format!("pitcrew batch {}", batch.dir.display());
    let mut total = Spend::default();
    for j in &batch.jobs {
        total.merge(&j.spend);
    }
    let durations: Vec<u64> = batch
        .jobs
        .iter()
        .filter(|j| !j.record.attempts.is_empty())
        .map(job_ms)
        .collect();
    let attempts: usize = batch.jobs.iter().map(|j| j.record.attempts.len()).sum();
    let missing: usize = batch.jobs.iter().map(|j| j.missing_runs).sum();
    let mut b = format!("<h1>{}</h1><dl class=\"facts\">", esc(&title));
    let _ = write!(
        b,
        "<dt>jobs</dt><dd>{}</dd><dt>attempts</dt><dd>{attempts}</dd><dt>time</dt><dd>{} (attempts summed)</dd>\
         <dt>total cost</dt><dd id=\"total-cost\">{}</dd>",
        batch.jobs.len(),
        duration(durations.iter().copied().fold(0, u64::saturating_add)),
        esc(&spend_text(&total)),
    );
    if missing > 0 {
        let _ = write!(b, "<dt>records missing</dt><dd class=\"warn\">{missing} reported run(s) not found: their usage is not counted</dd>");
    }
    b.push_str("</dl>");
    b.push_str("<h2>Duration distribution</h2>");
    if durations.is_empty() {
        b.push_str("<p>no job ran</p>");
    } else {
        b.push_str(&html::histogram(&html::bins(&durations, 10)));
    }
    let (inputs, css) = filters(&batch.jobs);
    let _ = write!(b, "<h2>Jobs</h2>{inputs}");
    b.push_str(
        "<table id=\"jobs\"><thead><tr><th>job</th><th>status</th><th class=\"num\">exit</th>\
         <th class=\"num\">attempts</th><th class=\"num\">time</th><th>tokens and cost</th><th>attempts (end, exit, time, sandbox)</th></tr></thead><tbody>",
    );
    for j in &batch.jobs {
        b.push_str(&job_row(j));
    }
    b.push_str("</tbody></table>");
    page(&title, &css, &b)
}

fn job_row(j: &Job) -> String {
    let r = &j.record;
    let name = status_name(r.status);
    let mut attempts = String::new();
    for a in &r.attempts {
        let end = serde_json::to_value(a.end).ok();
        let end = end.as_ref().and_then(|v| v.as_str()).unwrap_or("?");
        let _ = write!(
            attempts,
            "<div>#{}: {}{}, {}{}{}</div>",
            a.attempt,
            esc(end),
            a.exit_code
                .map(|c| format!(" exit {c}"))
                .unwrap_or_default(),
            duration(a.duration_ms),
            a.sandbox
                .as_deref()
                .map(|s| format!(", <code>{}</code>", esc(s)))
                .unwrap_or_default(),
            a.error
                .as_deref()
                .map(|e| format!(" <span class=\"bad\">{}</span>", esc(e)))
                .unwrap_or_default(),
        );
    }
    if let Some(dir) = &r.run_dir {
        let _ = write!(
            attempts,
            "<div class=\"muted\">records <code>{}</code></div>",
            esc(dir)
        );
    }
    if let Some(e) = r.error.as_deref().filter(|_| r.attempts.is_empty()) {
        let _ = write!(attempts, "<span class=\"bad\">{}</span>", esc(e));
    }
    let exit = r
        .exit_code
        .map(|c| {
            let meaning = i32::try_from(c).map(exit_code::meaning).unwrap_or_default();
            format!("<span title=\"{}\">{c}</span>", esc(&meaning))
        })
        .unwrap_or_else(|| "-".into());
    format!(
        "<tr class=\"job job-{name}\"><td><code>{}</code></td><td class=\"status status-{name}\">{name}</td>\
         <td class=\"num\">{exit}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td>{attempts}</td></tr>",
        esc(&r.id),
        r.attempts.len(),
        duration(job_ms(j)),
        esc(&spend_text(&j.spend)),
    )
}
