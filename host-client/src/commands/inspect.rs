//! `pitcrew inspect SANDBOX [--json]`: state, iteration history, a live re-verification with
//! drift, the processes running now and the confinement status, from `status{verify: true}`.

use crate::engine::{EngineArgs, SandboxId};
use crate::output::{out, outln};
use crate::report::{escape_controls, verification_summary};
use anyhow::Context as _;
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
        Err(e) if verify && e.refused_kind() == Some("busy") => {
            tracing::info!("{}", escape_controls(&e.to_string()));
            conn.client().status(false).map_err(|e| conn.explain(e))?
        }
        other => other.map_err(|e| conn.explain(e))?,
    };
    let hello = conn.hello().clone();
    conn.close();
    // `verify`: {ok, failures: [{exit_code, reason}], report: <verification report>}.
    let live = &status["verify"];
    let report: Option<pitcrew_core::verify::VerifyReport> = match &live["report"] {
        Value::Null => None,
        report => Some(
            serde_json::from_value(report.clone())
                .context("the supervisor's verification report does not parse")?,
        ),
    };
    let (_, summary, _) = verification_summary(report.as_ref());
    // A supervisor with no manifest (an exec session of the unprivileged mode: the host sends
    // the manifest with every run) has nothing to verify against: not a failure.
    let no_manifest = status["manifest_loaded"] == false;
    let ok = live.is_null() || no_manifest || live["ok"].as_bool().unwrap_or(false);
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

/// One process of the sandbox: `pid 12 (ppid 1, uid 65534): <command line>`; the command line
/// is the agent's to choose, so it is escaped like every other value.
fn process_line(p: &Value) -> String {
    if let Some(more) = p["more"].as_u64() {
        return format!("... and {more} more");
    }
    if p["pid"].is_null() {
        return compact(p);
    }
    format!(
        "pid {} (ppid {}, uid {}): {}",
        compact(&p["pid"]),
        compact(&p["ppid"]),
        compact(&p["uid"]),
        compact(&p["cmd"])
    )
}

/// The last iteration's confinement as indented lines: identity, privileges, Landlock,
/// seccomp and each limit with what enforced it.
fn confinement_lines(c: &Value) -> String {
    if c.is_null() {
        return "confinement: - (no iteration yet)\n".into();
    }
    let yes = |v: &Value| {
        if v.as_bool() == Some(true) {
            "yes"
        } else {
            "no"
        }
    };
    let mut out = String::from("confinement (last iteration):\n");
    out += &format!(
        "  agent: uid {} gid {}, no_new_privs {}, capabilities cleared {}\n",
        compact(&c["uid"]),
        compact(&c["gid"]),
        yes(&c["no_new_privs"]),
        yes(&c["caps_cleared"])
    );
    let l = &c["landlock"];
    out += &format!(
        "  landlock: {} (mode {}, ABI {})\n",
        compact(&l["status"]),
        compact(&l["mode"]),
        compact(&l["abi"])
    );
    out += &format!(
        "  seccomp: {}\n",
        if c["seccomp"]["installed"].as_bool() == Some(true) {
            "installed".to_string()
        } else {
            format!("not installed ({})", compact(&c["seccomp"]["unavailable"]))
        }
    );
    for (name, limit) in c["limits"].as_object().into_iter().flatten() {
        let line = match limit {
            Value::Object(_) if limit.get("enforced_by").is_some() => format!(
                "{} by {}",
                compact(&limit["limit"]),
                compact(&limit["enforced_by"])
            ),
            Value::Object(_) => format!(
                "{} (exceeded: {})",
                compact(&limit["limit"]),
                yes(&limit["exceeded"])
            ),
            other => compact(other),
        };
        out += &format!("  limit {}: {line}\n", escape_controls(name));
    }
    out
}

/// The text report. Every value that comes from the sandbox (reasons, meanings, command lines,
/// drifted names) is escaped: the agent chooses many of them.
fn render(
    id: &SandboxId,
    sandbox: &Value,
    hello: &crate::client::HelloReply,
    status: &Value,
    verification: &str,
) -> String {
    let mut out = String::new();
    let engine = sandbox["engine"].as_str().unwrap_or("?");
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
    if let Some(obj) = status.as_object() {
        // Known keys in reading order, then whatever else the supervisor reports.
        const ORDER: [&str; 7] = [
            "state",
            "iteration",
            "manifest_loaded",
            "history",
            "verify",
            "processes",
            "confinement",
        ];
        let mut keys: Vec<&String> = obj.keys().collect();
        keys.sort_by_key(|k| ORDER.iter().position(|o| o == k).unwrap_or(ORDER.len()));
        for key in keys {
            let value = &obj[key];
            let name = escape_controls(key);
            match key.as_str() {
                "verify" => {
                    out += &format!("verification (live): {}\n", escape_controls(verification));
                    for f in value["failures"].as_array().into_iter().flatten() {
                        out += &format!(
                            "  exit {}: {}\n",
                            compact(&f["exit_code"]),
                            compact(&f["reason"])
                        );
                    }
                }
                "capabilities" => {}
                "history" | "iterations" => {
                    let list = value.as_array().cloned().unwrap_or_default();
                    out += &format!("{name}: {}\n", list.len());
                    for it in list {
                        out += &format!(
                            "  iteration {}: exit {} {}\n",
                            compact(&it["iteration"]),
                            compact(&it["exit_code"]),
                            escape_controls(it["meaning"].as_str().unwrap_or_default())
                        );
                    }
                }
                "processes" => {
                    let list = value.as_array().cloned().unwrap_or_default();
                    out += &format!("processes: {}\n", list.len());
                    for p in list {
                        out += &format!("  {}\n", process_line(&p));
                    }
                }
                "confinement" => out += &confinement_lines(value),
                "claim" if value.is_null() => out += "claim: none (kept)\n",
                "claim" => {
                    out += &format!(
                        "claim: run {} {}, {} iteration(s){}\n",
                        compact(&value["run"]),
                        compact(&value["state"]),
                        value["iterations"].as_array().map_or(0, Vec::len),
                        value["orphaned_because"]
                            .as_str()
                            .map(|why| format!(" ({})", escape_controls(why)))
                            .unwrap_or_default()
                    );
                }
                "uncollected" => {
                    out += &format!(
                        "uncollected records: {} {}\n",
                        compact(&value["count"]),
                        compact(&value["iterations"])
                    );
                }
                "retention" => {
                    out += &format!(
                        "retention: newest {} collected records within {} bytes; {} kept ({} \
                         bytes), {} deleted\n",
                        compact(&value["records"]),
                        compact(&value["bytes"]),
                        compact(&value["kept"]),
                        compact(&value["kept_bytes"]),
                        compact(&value["deleted"])
                    );
                }
                _ => out += &format!("{name}: {}\n", compact(value)),
            }
        }
    } else {
        out += &format!("status: {}\n", compact(status));
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
        let status = json!({
            "state": "running\u{1b}[2J",
            "history": [{"iteration": 1, "exit_code": 96, "meaning": "plugin\u{7}\r tree differs"}],
            "verify": {"ok": false, "failures": [{"exit_code": 96, "reason": "tree-drifted: \u{1b}]0;x\u{7}"}]},
            "processes": [
                {"pid": 1, "ppid": 0, "uid": 0, "cmd": "pitcrew-init serve"},
                {"pid": 7, "ppid": 1, "uid": 65534, "cmd": "sh -c x \u{1b}[2J\u{7}\r\u{202e}\u{9b}1m"},
                {"more": 3}
            ],
            "\u{1b}[31mkey": "v\u{202e}"
        });
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
            "state: running\\x1b[2J",
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
        let confinement = json!({
            "uid": 65534, "gid": 65534, "no_new_privs": true, "caps_cleared": true,
            "landlock": {"status": "fully-enforced", "mode": "best-effort", "abi": 6},
            "seccomp": {"installed": true},
            "limits": {
                "processes": {"limit": 4096, "enforced_by": "cgroup-v1"},
                "memory": {"limit": 8589934592u64, "enforced_by": "rlimit-data"},
                "core": 0,
                "disk": {"limit": 16777216, "exceeded": false},
            },
        });
        let text = confinement_lines(&confinement);
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
            confinement_lines(&Value::Null),
            "confinement: - (no iteration yet)\n"
        );
    }
}
