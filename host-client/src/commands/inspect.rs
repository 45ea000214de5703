//! `pitcrew inspect SANDBOX [--json]`: state, iteration history, a live re-verification with
//! drift, the processes running now and the confinement status, from `status{verify: true}`.

use crate::engine::{ignore_sigpipe, EngineArgs, SandboxId};
use crate::report::verification_summary;
use serde_json::Value;
use std::process::ExitCode;

/// Arguments of `pitcrew inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The sandbox id (local engine) or name (exec engine).
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
    ignore_sigpipe();
    let engine = args.engine.engine()?;
    let id = SandboxId(args.sandbox.clone());
    let sandbox = engine.describe(&id)?;
    let mut conn = engine.connect(&id)?;
    let verify = !args.no_verify;
    let status = match conn.client().status(verify) {
        // Verification is refused while an iteration runs: report the rest.
        Err(e) if verify && e.refused_kind() == Some("busy") => {
            tracing::info!("{e}");
            conn.client().status(false).map_err(|e| conn.explain(e))?
        }
        other => other.map_err(|e| conn.explain(e))?,
    };
    let hello = conn.hello().clone();
    conn.close();
    // `verify`: {ok, failures: [{exit_code, reason}], report: <verification report>}.
    let live = &status["verify"];
    let (_, summary, _) = verification_summary(&live["report"]);
    let ok = live.is_null() || live["ok"].as_bool().unwrap_or(false);
    if args.json {
        let doc = serde_json::json!({
            "sandbox": sandbox,
            "supervisor": hello.supervisor,
            "protocol": hello.version,
            "capabilities": hello.capabilities,
            "status": status,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", render(&id, &sandbox, &hello, &status, &summary));
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn compact(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

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
        "sandbox {id} ({engine}), supervisor {}, mode {}, landlock ABI {}\n",
        hello.supervisor, hello.capabilities.mode, hello.capabilities.landlock_abi
    );
    if let Some(ns) = &hello.capabilities.user_namespace {
        out += &format!("rootless: user namespace {}\n", ns.describe());
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
            match key.as_str() {
                "verify" => {
                    out += &format!("verification (live): {verification}\n");
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
                    out += &format!("{key}: {}\n", list.len());
                    for it in list {
                        out += &format!(
                            "  iteration {}: exit {} {}\n",
                            compact(&it["iteration"]),
                            compact(&it["exit_code"]),
                            it["meaning"].as_str().unwrap_or_default()
                        );
                    }
                }
                "processes" => {
                    let list = value.as_array().cloned().unwrap_or_default();
                    out += &format!("processes: {}\n", list.len());
                    for p in list {
                        out += &format!("  {}\n", compact(&p));
                    }
                }
                _ => out += &format!("{key}: {}\n", compact(value)),
            }
        }
    } else {
        out += &format!("status: {}\n", compact(status));
    }
    out
}
