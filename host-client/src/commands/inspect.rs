//! `pitcrew inspect SANDBOX [--json]`: state, iteration history, a live re-verification with
//! drift, the processes running now and the confinement status, from `status{verify: true}`.

use crate::engine::{EngineArgs, SandboxId};
use crate::output::{out, outln};
use crate::report::{escape_controls, verification_summary};
use pitcrew_core::protocol::status::ProcessEntry;
use pitcrew_core::protocol::{ErrorKind, StatusDoc};
use pitcrew_core::result::ConfinementRecord;
use serde_json::Value;
use std::process::ExitCode;

/// Arguments of `pitcrew inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The sandbox id (or the container's name, with `--engine exec`).
    pub sandbox: String,
    /// Engine options.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Skip the live re-verification (it is refused while an iteration runs).
    #[arg(long)]
    pub no_verify: bool,
    /// Print the sandbox description and the supervisor's status as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `pitcrew inspect`: exit 0 when the live verification is clean (or skipped), 1 when
/// something drifted.
pub fn run(args: &InspectArgs) -> anyhow::Result<ExitCode> {
    let id = SandboxId(args.sandbox.clone());
    let engine = args.engine.engine_for(&id)?;
    let sandbox = engine.describe(&id)?;
    let mut conn = engine.connect(&id)?;
    let verify = !args.no_verify;
    let status = match conn.client().status(verify) {
        // Verification is refused while an iteration runs: report the rest.
        Err(e) if verify && e.refused_kind() == Some(&ErrorKind::Busy) => {
            tracing::info!("{}", escape_controls(&e.to_string()));
            conn.client().status(false).map_err(|e| conn.explain(e))?
        }
        other => other.map_err(|e| conn.explain(e))?,
    };
    let hello = conn.hello().clone();
    conn.close();
    let live = status.verify.as_ref();
    let (_, summary, _) = verification_summary(live.and_then(|v| v.report.as_ref()));
    // A supervisor with no manifest (an exec session of the unprivileged mode: the host sends
    // the manifest with every run) has nothing to verify against: not a failure.
    let ok = live.is_none_or(|v| v.ok) || !status.manifest_loaded;
    if args.json {
        let doc = serde_json::json!({
            "sandbox": sandbox,
            "supervisor": hello.supervisor,
            "protocol": hello.version,
            "capabilities": hello.capabilities,
            "status": status,
        });
        outln!("{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        out!("{}", render(&id, &sandbox, &hello, &status, &summary))?;
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// A value as text, escaped for the terminal (a string as it is, anything else as JSON).
fn compact(v: &Value) -> String {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    escape_controls(&text).into_owned()
}

/// A typed value as its JSON shows it, escaped ([`compact`]): the wire names of enums, `-` for
/// none.
fn shown<T: serde::Serialize>(v: &T) -> String {
    compact(&serde_json::to_value(v).unwrap_or_default())
}

/// One process of the sandbox: `pid 12 (ppid 1, uid 65534): <command line>`; the command line
/// is the agent's to choose, so it is escaped like every other value.
fn process_line(p: &ProcessEntry) -> String {
    match p {
        ProcessEntry::More { more } => format!("... and {more} more"),
        ProcessEntry::Process(p) => format!(
            "pid {} (ppid {}, uid {}): {}",
            p.pid,
            shown(&p.ppid),
            shown(&p.uid),
            escape_controls(&p.cmd)
        ),
    }
}

/// `yes` or `no`.
fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The last iteration's confinement as indented lines: identity, privileges, Landlock,
/// seccomp and each limit with what enforced it.
fn confinement_lines(c: Option<&ConfinementRecord>) -> String {
    let Some(c) = c else {
        return "confinement: - (no iteration yet)\n".into();
    };
    let mut out = String::from("confinement (last iteration):\n");
    out += &format!(
        "  agent: uid {} gid {}, no_new_privs {}, capabilities cleared {}\n",
        c.uid,
        c.gid,
        yes(c.no_new_privs),
        yes(c.caps_cleared)
    );
    let l = &c.landlock;
    out += &format!(
        "  landlock: {} (mode {}, ABI {})\n",
        shown(&l.status),
        shown(&l.mode),
        l.abi
    );
    out += &format!(
        "  seccomp: {}\n",
        if c.seccomp.installed {
            "installed".to_string()
        } else {
            format!("not installed ({})", shown(&c.seccomp.unavailable))
        }
    );
    let limits = &c.limits;
    for (name, limit) in [("processes", &limits.processes), ("memory", &limits.memory)] {
        out += &format!(
            "  limit {name}: {} by {}\n",
            limit.limit,
            shown(&limit.enforced_by)
        );
    }
    out += &format!("  limit core: {}\n", limits.core);
    if let Some(disk) = &limits.disk {
        out += &format!(
            "  limit disk: {} (exceeded: {})\n",
            disk.limit,
            yes(disk.exceeded)
        );
    }
    out
}

/// The text report. Every value that comes from the sandbox (reasons, meanings, command lines,
/// drifted names) is escaped: the agent chooses many of them.
fn render(
    id: &SandboxId,
    sandbox: &Value,
    hello: &crate::client::HelloReply,
    status: &StatusDoc,
    verification: &str,
) -> String {
    let mut out = String::new();
    let engine = sandbox.get("engine").and_then(Value::as_str).unwrap_or("?");
    out += &format!(
        "sandbox {} ({}), supervisor {}, mode {}, landlock ABI {}\n",
        escape_controls(&id.0),
        escape_controls(engine),
        escape_controls(&hello.supervisor),
        escape_controls(&hello.capabilities.mode),
        hello.capabilities.landlock_abi
    );
    if let Some(ns) = &hello.capabilities.user_namespace {
        out += &format!(
            "rootless: user namespace {}\n",
            escape_controls(&ns.describe())
        );
    }
    out += &format!("state: {}\n", shown(&status.state));
    out += &format!("iteration: {}\n", status.iteration);
    out += &format!("manifest_loaded: {}\n", status.manifest_loaded);
    out += &format!("history: {}\n", status.history.len());
    for it in &status.history {
        out += &format!(
            "  iteration {}: exit {} {}\n",
            it.iteration,
            it.exit_code,
            escape_controls(&it.meaning)
        );
    }
    if let Some(live) = &status.verify {
        out += &format!("verification (live): {}\n", escape_controls(verification));
        for f in &live.failures {
            out += &format!(
                "  exit {}: {}\n",
                shown(&f.exit_code),
                escape_controls(&f.reason)
            );
        }
    }
    out += &format!("processes: {}\n", status.processes.len());
    for p in &status.processes {
        out += &format!("  {}\n", process_line(p));
    }
    if !status.network.is_empty() {
        out += &format!("connections: {}\n", status.network.len());
        for c in &status.network {
            out += &format!(
                "  {}:{} via {}, {} B up, {} B down, {} ms\n",
                escape_controls(&c.host),
                c.port,
                escape_controls(&c.via),
                c.bytes_up,
                c.bytes_down,
                c.duration_ms
            );
        }
    }
    out += &confinement_lines(status.confinement.as_ref());
    match &status.claim {
        None => out += "claim: none (kept)\n",
        Some(claim) => {
            out += &format!(
                "claim: run {} {}, {} iteration(s){}\n",
                escape_controls(&claim.run),
                shown(&claim.state),
                claim.iterations.len(),
                claim
                    .orphaned_because
                    .as_deref()
                    .map(|why| format!(" ({})", escape_controls(why)))
                    .unwrap_or_default()
            );
        }
    }
    out += &format!("history_left_out: {}\n", status.history_left_out);
    if let Some(r) = &status.retention {
        out += &format!(
            "retention: newest {} collected records within {} bytes; {} kept ({} bytes), {} \
             deleted\n",
            shown(&r.records),
            shown(&r.bytes),
            r.kept,
            r.kept_bytes,
            r.deleted
        );
    }
    if let Some(u) = &status.uncollected {
        out += &format!(
            "uncollected records: {} {}\n",
            u.count,
            shown(&u.iterations)
        );
    }
    // Whatever else a newer supervisor reports.
    for (key, value) in &status.other {
        out += &format!("{}: {}\n", escape_controls(key), compact(value));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    #[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
    fn attack_terminal__inspect_escapes_command_lines_reasons_and_meanings() {
        let hello = crate::client::HelloReply {
            version: 1,
            supervisor: "pitcrew-init 0.1.0".into(),
            capabilities: serde_json::from_value(json!({
                "pid1": true, "mode": "pid1", "landlock_abi": 4, "uid_model": "uid 65534",
                "requests": []
            }))
            .unwrap(),
        };
        let status: StatusDoc = serde_json::from_value(json!({
            "state": "running\u{1b}[2J",
            "history": [{"iteration": 1, "exit_code": 96, "meaning": "plugin\u{7}\r tree differs",
                "started_at": 0, "duration_ms": 1}],
            "verify": {"ok": false, "failures": [{"exit_code": 96, "reason": "tree-drifted: \u{1b}]0;x\u{7}"}]},
            "processes": [
                {"pid": 1, "ppid": 0, "uid": 0, "cmd": "pitcrew-init serve"},
                {"pid": 7, "ppid": 1, "uid": 65534, "cmd": "sh -c x \u{1b}[2J\u{7}\r\u{202e}\u{9b}1m"},
                {"more": 3}
            ],
            "\u{1b}[31mkey": "v\u{202e}"
        }))
        .unwrap();
        let text = render(
            &SandboxId("pc-1".into()),
            &json!({"engine": "local"}),
            &hello,
            &status,
            "p drifted: added \u{1b}[2J.js",
        );
        let raw = pitcrew_e2e::raw_terminal_controls(&text);
        assert!(raw.is_empty(), "raw {raw:?} in {text}");
        for shown in [
            // A state this build does not know reads as `unknown`: its text is never shown.
            "state: unknown",
            "iteration 1: exit 96 plugin\\x07\\r tree differs",
            "verification (live): p drifted: added \\x1b[2J.js",
            "exit 96: tree-drifted: \\x1b]0;x\\x07",
            "sh -c x \\x1b[2J\\x07\\r\\u{202e}\\u{9b}1m",
            "\\x1b[31mkey: v\\u{202e}",
        ] {
            assert!(text.contains(shown), "{shown} not in\n{text}");
        }
    }

    #[test]
    fn confinement_claim_and_retention_read_as_text() {
        let confinement: ConfinementRecord = serde_json::from_value(json!({
            "uid": 65534, "gid": 65534, "groups": [], "no_new_privs": true, "caps_cleared": true,
            "landlock": {"status": "fully-enforced", "mode": "best-effort", "abi": 6},
            "seccomp": {"installed": true},
            "limits": {
                "processes": {"limit": 4096, "enforced_by": "cgroup-v1"},
                "memory": {"limit": 8589934592u64, "enforced_by": "rlimit-data"},
                "core": 0,
                "disk": {"limit": 16777216, "file_size_limit": 16777216, "sample_ms": 100,
                    "filesystems": [], "exceeded": false},
            },
        }))
        .unwrap();
        let text = confinement_lines(Some(&confinement));
        for shown in [
            "agent: uid 65534 gid 65534, no_new_privs yes, capabilities cleared yes",
            "landlock: fully-enforced (mode best-effort, ABI 6)",
            "seccomp: installed",
            "limit processes: 4096 by cgroup-v1",
            "limit disk: 16777216 (exceeded: no)",
        ] {
            assert!(text.contains(shown), "{shown} not in\n{text}");
        }
        assert!(!text.contains('{'), "{text}");
        assert_eq!(
            confinement_lines(None),
            "confinement: - (no iteration yet)\n"
        );
    }
}
