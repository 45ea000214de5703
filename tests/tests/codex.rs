//! The real Codex CLI (`@openai/codex` from npm, its static native binary) supervised by
//! `pitcrew-init`, driven by `pitcrew run` on the local engine, against the scripted model
//! server of `pitcrew_e2e::model_server` (OpenAI Responses API) on 127.0.0.1: the model asks
//! Codex's `exec_command` tool to run one command, which reports what the agent process sees.
//!
//! Needs root, PID namespaces and `codex` on `PATH` (`scripts/install-agents`, which `.ci/run`
//! runs, links it as /usr/local/bin/codex); skipped otherwise, or a failure with
//! `PITCREW_REQUIRE_E2E=1`.
#![allow(non_snake_case)] // attack tests are named attack_<class>__<case> (scripts/security-report)

use pitcrew_e2e::engines::{self, Engine, Kind};
use pitcrew_e2e::model_server::{
    last_tool_result, one_command_per_iteration, ModelServer, Reply, CACHE_READ_TOKENS,
    OUTPUT_TOKENS, PROMPT_TOKENS,
};
use pitcrew_e2e::{
    agent_version, iteration_dir, pitcrew_run, pitcrew_run_status, prerequisite, read_json,
    read_text, require_pid_namespaces,
};
use serde_json::{json, Value};
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;

/// The Codex CLI release these tests run.
const CODEX_VERSION: &str = "0.169.1";

/// The key pitcrew's environment holds; the sandbox sees its placeholder only.
const KEY: &str = "sk-e2e-real-key";

fn gate() -> bool {
    let version = agent_version("codex");
    require_pid_namespaces()
        && prerequisite(
            version
                .as_deref()
                .is_some_and(|v| v == format!("codex-cli {CODEX_VERSION}")),
            &format!(
                "needs the Codex CLI {CODEX_VERSION} on PATH (scripts/install-agents), found {version:?}"
            ),
        )
}

/// `exec_command`'s arguments for `command`.
fn exec(command: &str) -> Value {
    json!({ "cmd": command })
}

/// What the model asks Codex to run: the agent's uid, the key and config dir it sees, and the
/// confinement it runs under (Codex's own sandbox is off: pitcrew's confines it).
const PROBE: &str = "id -u; \
echo \"KEY=${OPENAI_API_KEY-unset} CODEX_HOME=${CODEX_HOME-unset}\"; \
grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status";

/// A harness for Codex with `OPENAI_BASE_URL` pointing at `server`, in a temp dir the agent's
/// uid can read, its workspace holding `AGENTS.md`; and a state dir for `pitcrew`.
struct Fixture {
    _dir: tempfile::TempDir,
    harness: PathBuf,
    state: PathBuf,
}

fn fixture(server: &ModelServer, iterations: u32) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::set_permissions(root, fs::Permissions::from_mode(0o755)).unwrap();
    fs::create_dir_all(root.join("workspace")).unwrap();
    fs::write(root.join("workspace/README.md"), "work\n").unwrap();
    fs::write(
        root.join("workspace/AGENTS.md"),
        "UPLOADED_AGENTS_MARK: the repository's own instructions\n",
    )
    .unwrap();
    let harness = root.join("harness.yaml");
    fs::write(
        &harness,
        format!(
            "runtime: codex\nprompt: \"please probe the sandbox\"\nagent:\n  model: mock-model\nenv:\n  OPENAI_BASE_URL: \"{}\"\niterations: {iterations}\ntimeout: 120s\nworkdir: workspace\n",
            server.base_url()
        ),
    )
    .unwrap();
    let state = root.join("state");
    fs::create_dir(&state).unwrap();
    Fixture {
        _dir: dir,
        harness,
        state,
    }
}

impl Fixture {
    /// Sets the harness's `agent.tools` to `list` (YAML).
    fn agent_tools(&self, list: &str) {
        let yaml = fs::read_to_string(&self.harness)
            .unwrap()
            .replace("agent:\n", &format!("agent:\n  tools: {list}\n"));
        fs::write(&self.harness, yaml).unwrap();
    }

    /// `pitcrew run` with the API key passed by name (kept on the host: the sandbox gets its
    /// placeholder): its exit code and document.
    fn run_status(&self) -> (Option<i32>, Value) {
        pitcrew_run_status(
            &self.harness,
            &self.state,
            &["--pass-env", "OPENAI_API_KEY"],
            &[("OPENAI_API_KEY", KEY)],
        )
    }
}

/// Pins `hooks.json` in Codex's config dir (`role: config`, `to: hooks.json`): a `PreToolUse`
/// hook that blocks any command naming `FORBIDDEN`, telling the model why.
fn pin_blocking_hooks(fx: &Fixture) {
    let root = fx.harness.parent().unwrap().to_path_buf();
    fs::create_dir_all(root.join("adapters")).unwrap();
    let hooks = json!({"hooks": {"PreToolUse": [{"matcher": ".*", "hooks": [{
        "type": "command",
        "command": "if grep -q FORBIDDEN; then echo 'blocked by the verified hook' >&2; exit 2; fi",
    }]}]}});
    fs::write(root.join("adapters/hooks.json"), hooks.to_string()).unwrap();
    let yaml = fs::read_to_string(&fx.harness).unwrap()
        + "adapters:\n  - path: adapters/hooks.json\n    role: config\n    to: hooks.json\n";
    fs::write(&fx.harness, yaml).unwrap();
}

/// Every text of a Responses request the model reads: `instructions` and each input item.
fn model_visible(request: &Value) -> String {
    format!("{}\n{}", request["instructions"], request["input"])
}

#[test]
fn codex_runs_a_command_confined_as_the_agent_and_the_model_hears_it() {
    if !gate() {
        return;
    }
    let server = ModelServer::start(one_command_per_iteration("exec_command", &[PROBE], exec));
    server.require_key(KEY);
    let fx = fixture(&server, 1);
    let doc = pitcrew_run(
        &fx.harness,
        &fx.state,
        &["--pass-env", "OPENAI_API_KEY"],
        &[("OPENAI_API_KEY", KEY)],
    );
    assert_eq!(doc["exit_code"], 0, "{doc:#}");

    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    // The tools Codex offers: its shell and nothing pitcrew turned off (web search, skills).
    let tools: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str().or(t["type"].as_str()))
        .collect();
    assert!(tools.contains(&"exec_command"), "{tools:?}");
    assert!(!tools.contains(&"web_search"), "{tools:?}");
    let probe = last_tool_result(&requests[1]).expect("the second request carries the result");
    // The command ran as the agent's uid, saw the placeholder and its fresh config dir.
    assert!(
        probe.contains("\n65534\n") || probe.contains("Output:\n65534"),
        "{probe}"
    );
    assert!(
        probe.contains("KEY=pitcrew-placeholder-OPENAI_API_KEY CODEX_HOME=/"),
        "{probe}"
    );
    assert!(!probe.contains(KEY), "{probe}");
    // pitcrew's confinement: no new privileges, a seccomp filter.
    for line in ["NoNewPrivs:\t1", "Seccomp:\t2"] {
        assert!(probe.contains(line), "{line}: {probe}");
    }
    // The host added the real key to each model request.
    for headers in server.headers() {
        assert!(
            headers
                .iter()
                .any(|(n, v)| n == "authorization" && v == &format!("Bearer {KEY}")),
            "{headers:?}"
        );
    }

    let it = iteration_dir(&doc, 1);
    let record = read_json(&it.join("result.json"));
    assert_eq!(record["exit_code"], 0, "{record:#}");
    let output = read_text(&it.join("output.jsonl"));
    assert!(output.contains(r#""type":"turn.completed""#), "{output}");
    assert!(output.contains("the tool said:"), "{output}");
    // Both model calls' tokens, as the model server reported them.
    let usage = &record["usage"];
    assert_eq!(usage["source"], "codex-json", "{record:#}");
    assert_eq!(
        [
            &usage["input_tokens"],
            &usage["output_tokens"],
            &usage["cache_read_tokens"],
        ],
        [
            2 * (PROMPT_TOKENS - CACHE_READ_TOKENS),
            2 * OUTPUT_TOKENS,
            2 * CACHE_READ_TOKENS,
        ],
        "{usage:#}"
    );
    // The argv pitcrew ran, the prompt hidden, and the release it found.
    let argv: Vec<&str> = record["agent"]["argv"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(&argv[1..3], ["exec", "--json"], "{argv:?}");
    assert_eq!(argv.last(), Some(&"<prompt>"), "{argv:?}");
    assert!(argv.contains(&"--ignore-user-config"), "{argv:?}");
    assert_eq!(
        record["verification"]["agent"]["version"], CODEX_VERSION,
        "{record:#}"
    );
}

/// A model error Codex cannot get past fails the iteration: Codex 0.169.1 ends the turn with
/// `turn.failed` and exits 1, the iteration's code.
#[test]
fn a_model_error_fails_the_codex_iteration() {
    if !gate() {
        return;
    }
    let server = ModelServer::start(|_| Reply::Error {
        status: 400,
        message: "scripted model failure".into(),
    });
    let fx = fixture(&server, 1);
    let (code, doc) = fx.run_status();
    assert_eq!(code, Some(1), "{doc:#}");
    let it = iteration_dir(&doc, 1);
    let record = read_json(&it.join("result.json"));
    assert_eq!(record["exit_code"], 1, "{record:#}");
    let output = read_text(&it.join("output.jsonl"));
    assert!(
        output.contains("turn.failed") && output.contains("scripted model failure"),
        "{output}"
    );
}

/// What iteration 1's agent plants everywhere Codex 0.169.1 would read instructions, skills,
/// configuration or hooks from at its next start (a hook that blocks every tool call, its
/// reason a marker the model would hear).
const PLANT: &str = r#"set -e
skill() { mkdir -p "$1/planted"; printf -- '---\nname: planted-%s\ndescription: PLANTED_SKILL_%s\n---\nx\n' "$2" "$2" > "$1/planted/SKILL.md"; }
echo 'PLANTED_AGENTS_MD' >> AGENTS.md
echo 'PLANTED_OVERRIDE_MD' > AGENTS.override.md
mkdir -p .codex && printf 'developer_instructions = "PLANTED_PROJECT_CONFIG"\n' > .codex/config.toml
skill .codex/skills repo; skill .agents/skills agents
mkdir -p "$HOME/.codex" && printf 'developer_instructions = "PLANTED_HOME_CONFIG"\n' > "$HOME/.codex/config.toml"
echo 'PLANTED_HOME_AGENTS' > "$HOME/.codex/AGENTS.md"
skill "$HOME/.agents/skills" home
# CODEX_HOME's hooks, configuration and instructions are root's guards: these writes are refused.
printf 'developer_instructions = "PLANTED_CODEX_HOME_CONFIG"\n' > "$CODEX_HOME/config.toml" || true
echo 'PLANTED_CODEX_HOME_AGENTS' > "$CODEX_HOME/AGENTS.md" || true
skill "$CODEX_HOME/skills" codexhome
hooks='{"hooks": {"PreToolUse": [{"matcher": ".*", "hooks": [{"type": "command", "command": "echo PLANTED_HOOK >&2; exit 2"}]}]}}'
printf '%s\n' "$hooks" > "$CODEX_HOME/hooks.json" || true; printf '%s\n' "$hooks" > .codex/hooks.json
echo planted"#;

/// Nothing iteration 1 planted (in the workspace, `HOME` or `CODEX_HOME`) reaches the model in
/// iteration 2, while the repository's own `AGENTS.md` does.
#[test]
fn attack_leftovers__what_codex_reads_at_start_is_never_what_an_earlier_iteration_wrote() {
    if !gate() {
        return;
    }
    let (record, seen) = plant_then_look(None);
    assert!(!seen.contains("PLANTED_"), "{seen}");
    assert!(seen.contains("UPLOADED_AGENTS_MARK"), "{seen}");
    // The record names the context file Codex read and the ones set back.
    let context = record["context_files"].to_string();
    assert!(
        context.contains("AGENTS.md") && context.contains("AGENTS.override.md"),
        "{context}"
    );
    // The control: with the workspace's context files as they are, Codex reads the override
    // the first iteration wrote (so the markers above would have been seen), and still none
    // of the rest.
    let (_, seen) = plant_then_look(Some("as-is"));
    assert!(seen.contains("PLANTED_OVERRIDE_MD"), "{seen}");
    let others = seen.replace("PLANTED_OVERRIDE_MD", "");
    assert!(!others.contains("PLANTED_"), "{seen}");
    // `none`: not even the repository's own file.
    let (record, seen) = plant_then_look(Some("none"));
    assert!(!seen.contains("PLANTED_"), "{seen}");
    assert!(!seen.contains("UPLOADED_AGENTS_MARK"), "{seen}");
    assert_eq!(record["context_files"]["mode"], "none", "{record:#}");
}

/// Two iterations, the first running [`PLANT`], under `agent.context_files: context` (the
/// harness default when `None`): the second iteration's record and what the model was given in
/// it.
fn plant_then_look(context: Option<&str>) -> (Value, String) {
    let server = ModelServer::start(one_command_per_iteration(
        "exec_command",
        &[PLANT, "echo second"],
        exec,
    ));
    let fx = fixture(&server, 2);
    if let Some(context) = context {
        let yaml = fs::read_to_string(&fx.harness).unwrap().replace(
            "  model: mock-model\n",
            &format!("  model: mock-model\n  context_files: {context}\n"),
        );
        fs::write(&fx.harness, yaml).unwrap();
    }
    let (code, doc) = fx.run_status();
    assert_eq!(code, Some(0), "{doc:#}");
    let requests = server.requests();
    assert_eq!(requests.len(), 4, "{requests:#?}");
    let planted = last_tool_result(&requests[1]).unwrap_or_default();
    assert!(planted.lines().any(|l| l == "planted"), "{planted}");
    let seen = requests[2..].iter().map(model_visible).collect();
    (read_json(&iteration_dir(&doc, 2).join("result.json")), seen)
}

/// `codex exec --help` of the installed release is the one its table was generated from
/// (`scripts/codex-help/<v>.txt`, by `scripts/codex-options`) and lists exactly the options
/// pitcrew's table classifies (`supervisor/src/env_policy/codex_options.rs`).
#[test]
fn the_codex_option_table_matches_the_installed_release() {
    if !gate() {
        return;
    }
    let out = std::process::Command::new("codex")
        .args(["exec", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let saved = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../scripts/codex-help/{CODEX_VERSION}.txt"));
    assert_eq!(
        help,
        fs::read_to_string(&saved).unwrap(),
        "Codex {CODEX_VERSION}'s exec options changed; run scripts/codex-options and commit \
         the result"
    );
    let mut listed: Vec<String> = Vec::new();
    for line in help.lines() {
        let line = line.trim_start();
        if !line.starts_with('-') {
            continue;
        }
        for word in line.split([',', ' ']).filter(|w| w.starts_with('-')) {
            listed.push(word.to_string());
        }
    }
    listed.sort();
    listed.dedup();
    let (_, table) = pitcrew_core::env_policy::codex_options::CODEX_RELEASES
        .iter()
        .find(|(v, _)| *v == CODEX_VERSION)
        .unwrap();
    let mut known: Vec<String> = table.iter().map(|o| o.name.to_string()).collect();
    known.sort();
    assert_eq!(listed, known, "{help}");
}

/// `agent.args` that would load configuration, grant project trust or bypass a sandbox are
/// refused by `validate` and by `run` (nothing starts: the model server hears nothing), each
/// named with its line, the release and why.
#[test]
fn attack_harness__codex_agent_args_never_load_config_or_grant_trust() {
    if !gate() {
        return;
    }
    let server = ModelServer::start(|_| Reply::Text("never asked".into()));
    let fx = fixture(&server, 1);
    let yaml = fs::read_to_string(&fx.harness).unwrap().replace(
        "  model: mock-model\n",
        "  model: mock-model\n  args: [\"-c\", \"mcp_servers.x.command=\\\"sh\\\"\", \"--trust\", \"--dangerously-bypass-approvals-and-sandbox\"]\n",
    );
    fs::write(&fx.harness, yaml).unwrap();
    let out = std::process::Command::new(pitcrew_e2e::binary("pitcrew"))
        .arg("validate")
        .arg(&fx.harness)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    for option in [
        "-c is an option of Codex CLI 0.169.1",
        "--trust",
        "--dangerously-bypass-approvals-and-sandbox",
    ] {
        assert!(text.contains(option), "{option}: {text}");
    }
    let (code, doc) = fx.run_status();
    assert_ne!(code, Some(0), "{doc:#}");
    assert!(server.requests().is_empty(), "{:#?}", server.requests());
}

/// A model endpoint nobody listens on fails the iteration once Codex's bounded retries are
/// spent (`turn.failed`, exit 1); by default Codex 0.169.1 would wait for the network until
/// the iteration's timeout.
#[test]
fn an_unreachable_model_fails_the_codex_iteration_instead_of_waiting() {
    if !gate() {
        return;
    }
    // A port that was free a moment ago: nothing answers there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = ModelServer::start(|_| Reply::Text("never asked".into()));
    let fx = fixture(&server, 1);
    let yaml = fs::read_to_string(&fx.harness)
        .unwrap()
        .replace(&server.base_url(), &format!("http://127.0.0.1:{port}/v1"))
        .replace("timeout: 120s", "timeout: 300s");
    fs::write(&fx.harness, yaml).unwrap();
    let (code, doc) = fx.run_status();
    assert_eq!(code, Some(1), "{doc:#}");
    let it = iteration_dir(&doc, 1);
    let record = read_json(&it.join("result.json"));
    assert_eq!(record["agent"]["timed_out"], false, "{record:#}");
    let output = read_text(&it.join("output.jsonl"));
    assert!(output.contains(r#""type":"turn.failed""#), "{output}");
}

/// A `hooks.json` the harness pins in Codex's config dir (`role: config`, `to: hooks.json`)
/// is the one set of hooks Codex runs: its `PreToolUse` hook blocks a command and the model
/// hears why, and the repository's own `.codex/hooks.json` does not run; pitcrew has Codex
/// trust the verified file (`--dangerously-bypass-hook-trust`) in place of `--disable hooks`.
#[test]
fn a_pinned_hooks_json_blocks_a_command_and_codex_hears_why() {
    if !gate() {
        return;
    }
    let server = ModelServer::start(one_command_per_iteration(
        "exec_command",
        &["mkdir -p output; echo FORBIDDEN > output/proof"],
        exec,
    ));
    let fx = fixture(&server, 1);
    pin_blocking_hooks(&fx);
    let root = fx.harness.parent().unwrap().to_path_buf();
    // The repository's own hooks are not run with it (an untrusted project).
    let planted = json!({"hooks": {"PreToolUse": [{"matcher": ".*", "hooks": [{
        "type": "command", "command": "echo PLANTED_PROJECT_HOOK >&2; exit 2",
    }]}]}});
    fs::create_dir_all(root.join("workspace/.codex")).unwrap();
    fs::write(
        root.join("workspace/.codex/hooks.json"),
        planted.to_string(),
    )
    .unwrap();
    let (code, doc) = fx.run_status();
    assert_eq!(code, Some(0), "{doc:#}");
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    let result = last_tool_result(&requests[1]).expect("the tool's result");
    assert!(result.contains("blocked by the verified hook"), "{result}");
    assert!(!result.contains("PLANTED_PROJECT_HOOK"), "{result}");
    let it = iteration_dir(&doc, 1);
    assert!(!it.join("output/proof").exists(), "the blocked command ran");
    let record = read_json(&it.join("result.json"));
    let argv = record["agent"]["argv"].to_string();
    assert!(argv.contains("--dangerously-bypass-hook-trust"), "{argv}");
    assert!(!argv.contains(r#""--disable","hooks""#), "{argv}");
}

/// The agent replaces the pinned `hooks.json` in `CODEX_HOME` (its config dir, which Codex
/// writes its state into) mid-iteration: Codex read its hooks at start, so the next
/// `FORBIDDEN` command of the same run is still blocked.
#[test]
fn attack_runtime_tamper__a_hooks_json_rewritten_mid_iteration_never_turns_off_the_verified_hook() {
    if !gate() {
        return;
    }
    let server = ModelServer::start(|request: &Value| {
        let outputs = request["input"].as_array().map_or(0, |i| {
            i.iter()
                .filter(|i| i["type"] == "function_call_output")
                .count()
        });
        let cmd = match outputs {
            0 => {
                r#"mv "$CODEX_HOME/hooks.json" "$CODEX_HOME/was.json"; echo '{"hooks": {}}' > "$CODEX_HOME/hooks.json" && echo rewrote"#
            }
            1 => "mkdir -p output; echo FORBIDDEN > output/proof",
            _ => return Reply::Text("done".into()),
        };
        Reply::ToolCall {
            name: "exec_command".into(),
            arguments: exec(cmd),
        }
    });
    let fx = fixture(&server, 1);
    pin_blocking_hooks(&fx);
    let (code, doc) = fx.run_status();
    assert_eq!(code, Some(0), "{doc:#}");
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "{requests:#?}");
    // The pinned `hooks.json` is root's in a sticky config dir: neither moved nor overwritten.
    let rewrote = last_tool_result(&requests[1]).unwrap_or_default();
    assert!(!rewrote.lines().any(|l| l == "rewrote"), "{rewrote}");
    assert!(rewrote.contains("Operation not permitted"), "{rewrote}");
    let blocked = last_tool_result(&requests[2]).unwrap_or_default();
    assert!(
        blocked.contains("blocked by the verified hook"),
        "{blocked}"
    );
    assert!(!iteration_dir(&doc, 1).join("output/proof").exists());
}

/// The real key of this test process (two halves, [`pitcrew_e2e::model_secret`]).
fn secret() -> &'static str {
    static KEY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    KEY.get_or_init(|| pitcrew_e2e::model_secret("sk-codex-e2e-KEEP"))
}

/// The iteration's one command: what the agent has, then a search for [`secret`] in the
/// sandbox ([`pitcrew_e2e::secret_scan`]).
fn secret_probes() -> &'static [&'static str] {
    pitcrew_e2e::secret_scan(
        "sk-codex-e2e-KEEP",
        "echo \"KEY=$OPENAI_API_KEY BASE=$OPENAI_BASE_URL\"",
        "CODEX_HOME",
    )
}

/// Codex gives every command its model runs its whole environment: the key passed with
/// `--pass-env` must not be in it, nor anywhere else in the sandbox; a `.env` that would
/// redirect the model traffic or set the key is refused; the host adds the key to each model
/// request, and the records never hold it.
#[test]
fn attack_secrets__the_model_key_never_enters_codexs_sandbox() {
    if !gate() {
        return;
    }
    let server = ModelServer::start(one_command_per_iteration(
        "exec_command",
        secret_probes(),
        exec,
    ));
    server.require_key(secret());
    let fx = fixture(&server, 1);
    let root = fx.harness.parent().unwrap().to_path_buf();
    fs::write(
        root.join("workspace/.env"),
        "OPENAI_BASE_URL=http://127.0.0.1:9/v1\nOPENAI_API_KEY=sk-from-dotenv\nCODEX_HOME=/tmp\n",
    )
    .unwrap();
    let yaml = fs::read_to_string(&fx.harness).unwrap() + "dotenv: .env\n";
    fs::write(&fx.harness, yaml).unwrap();
    let (code, doc) = pitcrew_run_status(
        &fx.harness,
        &fx.state,
        &["--pass-env", "OPENAI_API_KEY"],
        &[("OPENAI_API_KEY", secret())],
    );
    assert_eq!(code, Some(0), "{doc:#}");
    let results = server.tool_results();
    let out = results.first().expect("the probe's result");
    assert!(
        out.contains("KEY=pitcrew-placeholder-OPENAI_API_KEY BASE=http://127.0.0.1:"),
        "{out}"
    );
    assert!(out.contains("SCAN_DONE rc="), "{out}");
    assert!(
        !out.contains("SCAN_DONE rc=124"),
        "the scan timed out: {out}"
    );
    assert!(!out.contains("FOUND"), "the key is in the sandbox: {out}");
    for h in server.headers() {
        assert!(
            h.contains(&("authorization".into(), format!("Bearer {}", secret()))),
            "{h:?}"
        );
    }
    let record = read_json(&iteration_dir(&doc, 1).join("result.json"));
    let route = &record["network"]["model"];
    assert_eq!(route["credentials"], json!(["OPENAI_API_KEY"]), "{route:#}");
    assert_eq!(route["base_url_env"], "OPENAI_BASE_URL", "{route:#}");
    let refused = record["env"]["dotenv_refused"].to_string();
    for name in ["OPENAI_BASE_URL", "OPENAI_API_KEY", "CODEX_HOME"] {
        assert!(refused.contains(name), "{name}: {refused}");
    }
    let run_dir = PathBuf::from(doc["run_dir"].as_str().unwrap());
    let mut stack = vec![run_dir];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else {
                let bytes = fs::read(&path).unwrap_or_default();
                assert!(
                    !bytes
                        .windows(secret().len())
                        .any(|w| w == secret().as_bytes()),
                    "the record file {} holds the key",
                    path.display()
                );
            }
        }
    }
}

/// The control of [`attack_secrets__the_model_key_never_enters_codexs_sandbox`]: under
/// `network: open` the key passed with `--pass-env` enters the sandbox as it is, and the same
/// probe finds it (so its finding nothing above means something).
#[test]
fn control_a_key_passed_to_codex_under_an_open_network_is_found_by_the_same_probe() {
    if !gate() {
        return;
    }
    let server = ModelServer::start(one_command_per_iteration(
        "exec_command",
        secret_probes(),
        exec,
    ));
    server.require_key(secret());
    let fx = fixture(&server, 1);
    let yaml = fs::read_to_string(&fx.harness).unwrap() + "network: open\n";
    fs::write(&fx.harness, yaml).unwrap();
    let (code, doc) = pitcrew_run_status(
        &fx.harness,
        &fx.state,
        &["--pass-env", "OPENAI_API_KEY"],
        &[("OPENAI_API_KEY", secret())],
    );
    assert_eq!(code, Some(0), "{doc:#}");
    let results = server.tool_results();
    let out = results.first().expect("the probe's result");
    assert!(out.contains("FOUND env OPENAI_API_KEY="), "{out}");
}

/// The runner's values (`--runner-env FULLSEND_*=…`) reach the verified hook Codex runs: it
/// blocks the call naming the allowlist it was given, and the record names the variable
/// `runner`, never its value.
#[test]
fn the_runner_env_reaches_codexs_verified_hook() {
    if !gate() {
        return;
    }
    let server = ModelServer::start(one_command_per_iteration(
        "exec_command",
        &["mkdir -p output; echo RAN > output/proof"],
        exec,
    ));
    let fx = fixture(&server, 1);
    let root = fx.harness.parent().unwrap().to_path_buf();
    fs::create_dir_all(root.join("adapters")).unwrap();
    let hooks = json!({"hooks": {"PreToolUse": [{"matcher": ".*", "hooks": [{
        "type": "command",
        "command": "echo \"exec_command is not in the allowlist ${FULLSEND_TOOL_ALLOWLIST-unset}\" >&2; exit 2",
    }]}]}});
    fs::write(root.join("adapters/hooks.json"), hooks.to_string()).unwrap();
    let yaml = fs::read_to_string(&fx.harness).unwrap()
        + "adapters:\n  - path: adapters/hooks.json\n    role: config\n    to: hooks.json\n";
    fs::write(&fx.harness, yaml).unwrap();
    let (code, doc) = pitcrew_run_status(
        &fx.harness,
        &fx.state,
        &[
            "--pass-env",
            "OPENAI_API_KEY",
            "--runner-env",
            "FULLSEND_TOOL_ALLOWLIST=read_file",
        ],
        &[("OPENAI_API_KEY", KEY)],
    );
    assert_eq!(code, Some(0), "{doc:#}");
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    let result = last_tool_result(&requests[1]).expect("the tool's result");
    assert!(
        result.contains("exec_command is not in the allowlist read_file"),
        "{result}"
    );
    let it = iteration_dir(&doc, 1);
    assert!(!it.join("output/proof").exists(), "the blocked command ran");
    let record = read_json(&it.join("result.json"));
    assert_eq!(
        record["env"]["layers"]["FULLSEND_TOOL_ALLOWLIST"], "runner",
        "{record:#}"
    );
    assert!(!record.to_string().contains("read_file"), "{record:#}");
}

/// A model that asks `exec_command` to run `steps` in order, one per tool round, then stops.
fn steps(steps: &'static [&'static str]) -> impl Fn(&Value) -> Reply + Send + Sync + 'static {
    move |request: &Value| {
        let outputs = request["input"].as_array().map_or(0, |i| {
            i.iter()
                .filter(|i| i["type"] == "function_call_output")
                .count()
        });
        match steps.get(outputs) {
            Some(cmd) => Reply::ToolCall {
                name: "exec_command".into(),
                arguments: exec(cmd),
            },
            None => Reply::Text("done".into()),
        }
    }
}

/// The agent writes the shell start-up files of its home (which the home guard leaves it to
/// create) with a `grep` that finds nothing, then runs a `FORBIDDEN` command: the pinned
/// hook, a shell command run by Codex, must still block it.
#[test]
fn attack_runtime_tamper__shell_start_up_files_the_agent_writes_never_change_codexs_verified_hook()
{
    if !gate() {
        return;
    }
    let server = ModelServer::start(steps(&[
        r#"for f in .profile .bash_profile .bash_login .bashrc .zshenv .zprofile .zshrc .shrc .kshrc; do printf 'grep() { return 1; }\nalias grep=false\necho SOURCED_%s >> /proc/self/fd/2\n' "$f" > "$HOME/$f"; done; ls -la "$HOME"; echo planted"#,
        "mkdir -p output; echo FORBIDDEN > output/proof",
    ]));
    let fx = fixture(&server, 1);
    let root = fx.harness.parent().unwrap().to_path_buf();
    fs::create_dir_all(root.join("adapters")).unwrap();
    let hooks = json!({"hooks": {"PreToolUse": [{"matcher": ".*", "hooks": [{
        "type": "command",
        "command": "mkdir -p output; tr '\\0' ' ' </proc/$$/cmdline >> output/hookshell; echo \" flags=$-\" >> output/hookshell; if grep -q FORBIDDEN; then echo 'blocked by the verified hook' >&2; exit 2; fi",
    }]}]}});
    fs::write(root.join("adapters/hooks.json"), hooks.to_string()).unwrap();
    let yaml = fs::read_to_string(&fx.harness).unwrap()
        + "adapters:\n  - path: adapters/hooks.json\n    role: config\n    to: hooks.json\n";
    fs::write(&fx.harness, yaml).unwrap();
    let (code, doc) = fx.run_status();
    let it = iteration_dir(&doc, 1);
    let shell = fs::read_to_string(it.join("output/hookshell")).unwrap_or_default();
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "{code:?} {shell} {requests:#?}");
    let planted = last_tool_result(&requests[1]).unwrap_or_default();
    assert!(planted.contains("planted"), "{planted}");
    let blocked = last_tool_result(&requests[2]).unwrap_or_default();
    assert!(
        blocked.contains("blocked by the verified hook"),
        "hook shell: {shell}\n{blocked}"
    );
    assert!(!it.join("output/proof").exists(), "hook shell: {shell}");
    eprintln!("hook shell: {shell}\nplanted: {planted}\nblocked: {blocked}");
}

/// Whether `request` is a sub-agent's: its user message carries `SUBTASK`.
fn is_subagent(request: &Value) -> bool {
    request["input"].as_array().is_some_and(|items| {
        items.iter().any(|i| {
            i["type"] == "message"
                && i["role"] == "user"
                && i["content"].to_string().contains("SUBTASK")
        })
    })
}

/// The number of tool results in `request`.
fn outputs(request: &Value) -> usize {
    request["input"].as_array().map_or(0, |i| {
        i.iter()
            .filter(|i| i["type"] == "function_call_output")
            .count()
    })
}

/// The model spawns a sub-agent (Codex's `multi_agent_v1`, on by default) after `before`
/// (commands of the main thread), and the sub-agent runs a `FORBIDDEN` command: the pinned
/// hook must block it as it does the main thread's.
fn subagent_model(
    before: &'static [&'static str],
) -> impl Fn(&Value) -> Reply + Send + Sync + 'static {
    subagent_model_then(before, &[])
}

/// [`subagent_model`], the main thread running `after` once the sub-agent is done.
fn subagent_model_then(
    before: &'static [&'static str],
    after: &'static [&'static str],
) -> impl Fn(&Value) -> Reply + Send + Sync + 'static {
    move |request: &Value| {
        let n = outputs(request);
        if is_subagent(request) {
            return match n {
                0 => Reply::ToolCall {
                    name: "exec_command".into(),
                    arguments: exec("mkdir -p output; echo FORBIDDEN > output/proof; echo SUB_RAN"),
                },
                _ => Reply::Text(format!(
                    "sub done: {}",
                    last_tool_result(request).unwrap_or_default()
                )),
            };
        }
        if let Some(cmd) = before.get(n) {
            return Reply::ToolCall {
                name: "exec_command".into(),
                arguments: exec(cmd),
            };
        }
        match n - before.len() {
            0 => Reply::ToolCall {
                name: "multi_agent_v1::spawn_agent".into(),
                arguments: json!({"message": "SUBTASK: run the command you are asked to"}),
            },
            1 => {
                let spawned = last_tool_result(request).unwrap_or_default();
                let id = serde_json::from_str::<Value>(&spawned)
                    .ok()
                    .and_then(|v| v["agent_id"].as_str().map(str::to_string))
                    .unwrap_or(spawned);
                Reply::ToolCall {
                    name: "multi_agent_v1::wait_agent".into(),
                    arguments: json!({"targets": [id], "timeout_ms": 60000}),
                }
            }
            k => match after.get(k - 2) {
                Some(cmd) => Reply::ToolCall {
                    name: "exec_command".into(),
                    arguments: exec(cmd),
                },
                None => Reply::Text("done".into()),
            },
        }
    }
}

#[test]
fn attack_runtime_tamper__a_codex_subagent_runs_under_the_verified_hook() {
    if !gate() {
        return;
    }
    let server = ModelServer::start(subagent_model(&[]));
    let fx = fixture(&server, 1);
    fx.agent_tools("[shell, multi_agent]");
    pin_blocking_hooks(&fx);
    let (code, doc) = fx.run_status();
    let it = iteration_dir(&doc, 1);
    let requests = server.requests();
    let dump: Vec<String> = requests
        .iter()
        .map(|r| {
            format!(
                "sub={} n={} last={:?}",
                is_subagent(r),
                outputs(r),
                last_tool_result(r)
            )
        })
        .collect();
    eprintln!("code {code:?}\n{}", dump.join("\n"));
    assert!(
        requests.iter().any(is_subagent),
        "no sub-agent request: {dump:#?}"
    );
    assert!(
        !it.join("output/proof").exists(),
        "the sub-agent's FORBIDDEN command ran: {dump:#?}"
    );
}

/// The main thread tries to replace the pinned `hooks.json` in `CODEX_HOME` (the config dir),
/// then spawns a sub-agent (`multi_agent_v1`, named in `agent.tools`), which reads `hooks.json`
/// again when spawned: the sub-agent's `FORBIDDEN` command must still be blocked by the
/// verified hook, as the main thread's is. Seen on 0.169.1 while the config dir was the
/// agent's: the replacement (put back once the sub-agent was done, so no drift) turned the hook
/// off for the sub-agent in both iterations, named nowhere. Now the config dir is root's with
/// the sticky bit and the pinned file root's (`codex_config`).
#[test]
fn attack_runtime_tamper__a_hooks_json_rewritten_before_a_codex_subagent_spawns_never_turns_off_the_verified_hook(
) {
    if !gate() {
        return;
    }
    let server = ModelServer::start(subagent_model_then(
        &[
            r#"mv "$CODEX_HOME/hooks.json" "$CODEX_HOME/was.json"; echo '{"hooks": {}}' > "$CODEX_HOME/hooks.json" && echo rewrote"#,
        ],
        // Put back once the sub-agent is done: the next verification finds no drift.
        &[r#"mv -f "$CODEX_HOME/was.json" "$CODEX_HOME/hooks.json" && echo restored"#],
    ));
    let fx = fixture(&server, 2);
    fx.agent_tools("[shell, multi_agent]");
    pin_blocking_hooks(&fx);
    let (code, doc) = fx.run_status();
    let results = server.tool_results();
    // `hooks.json` is pinned, root's, in a sticky config dir: the agent can neither move it
    // nor write in its place.
    assert!(
        !results.iter().any(|r| r.contains("rewrote")),
        "{results:#?}"
    );
    let requests = server.requests();
    let sub: Vec<String> = requests
        .iter()
        .filter(|r| is_subagent(r))
        .filter_map(last_tool_result)
        .collect();
    assert!(
        !sub.is_empty(),
        "the sub-agent ran no command: {requests:#?}"
    );
    let exits: Vec<Value> = (1..=2)
        .map(|i| read_json(&iteration_dir(&doc, i).join("result.json"))["exit_code"].clone())
        .collect();
    for i in 1..=2 {
        assert!(
            !iteration_dir(&doc, i).join("output/proof").exists(),
            "iteration {i}: the sub-agent's FORBIDDEN command ran (run exit {code:?}, iteration exits {exits:?}): {sub:#?}"
        );
    }
    assert!(
        sub.iter()
            .all(|r| r.contains("blocked by the verified hook")),
        "{sub:#?}"
    );
}

/// The main thread writes `AGENTS.md` in `CODEX_HOME` and `AGENTS.override.md` in the workdir,
/// then asks for a sub-agent, which would read both again when spawned, past what the record
/// names (seen on 0.169.1 while sub-agents were on by default and the config dir the agent's).
/// Now `CODEX_HOME/AGENTS.md` is a root-owned empty file the agent cannot write, and without
/// `agent.tools` naming `multi_agent` Codex has no sub-agents: no request but the main
/// thread's, and none carries what the agent wrote.
#[test]
fn attack_runtime_tamper__context_files_written_mid_iteration_never_reach_a_codex_subagent_unrecorded(
) {
    if !gate() {
        return;
    }
    let server = ModelServer::start(subagent_model(&[concat!(
        r#"echo 'PLANTED_HOME_AGENTS_MARK' > "$CODEX_HOME/AGENTS.md"; "#,
        r#"echo 'PLANTED_OVERRIDE_MARK' > AGENTS.override.md; echo rewrote"#
    )]));
    let fx = fixture(&server, 1);
    let (code, doc) = fx.run_status();
    assert_eq!(code, Some(0), "{doc:#}");
    let requests = server.requests();
    assert!(
        !requests.iter().any(is_subagent),
        "a sub-agent ran without agent.tools naming multi_agent: {requests:#?}"
    );
    let planted = last_tool_result(&requests[1]).unwrap_or_default();
    assert!(
        planted.contains("AGENTS.md: Permission denied"),
        "{planted}"
    );
    let record = read_json(&iteration_dir(&doc, 1).join("result.json"));
    let guarded = record["codex_config"]["guarded"].to_string();
    assert!(guarded.contains("\"AGENTS.md\""), "{record:#}");
}

/// A Codex plugin bundle (`.codex-plugin/plugin.json`) at `plugins/probe-codex` beside the
/// harness, listed in its `plugins:`: a skill and an MCP server (`.mcp.json`, started in the
/// plugin's directory) whose one tool's description says the uid and `NoNewPrivs` it runs
/// with, and a `PreToolUse` hook (`hooks/hooks.json`) blocking a command naming
/// `PLUGIN_FORBIDDEN`, saying the uid it runs as.
fn add_codex_plugin(fx: &Fixture) {
    let root = fx.harness.parent().unwrap().join("plugins/probe-codex");
    fs::create_dir_all(root.join(".codex-plugin")).unwrap();
    fs::create_dir_all(root.join("hooks")).unwrap();
    let hooks = json!({"hooks": {"PreToolUse": [{"matcher": ".*", "hooks": [{
        "type": "command",
        "command": "if grep -q PLUGIN_FORBIDDEN; then echo \"blocked by the plugin's hook uid=$(id -u)\" >&2; exit 2; fi",
    }]}]}});
    fs::write(root.join("hooks/hooks.json"), hooks.to_string()).unwrap();
    fs::create_dir_all(root.join("skills/probe-skill")).unwrap();
    fs::write(
        root.join(".codex-plugin/plugin.json"),
        r#"{"name": "probe-codex", "version": "1.0.0", "description": "pitcrew's probe"}"#,
    )
    .unwrap();
    fs::write(
        root.join("skills/probe-skill/SKILL.md"),
        "---\nname: probe-skill\ndescription: VERIFIED_PLUGIN_SKILL\n---\nbody\n",
    )
    .unwrap();
    fs::write(
        root.join(".mcp.json"),
        r#"{"mcpServers": {"verified": {"command": "python3", "args": ["server.py"], "cwd": "."}}}"#,
    )
    .unwrap();
    fs::write(
        root.join("server.py"),
        r#"import json, os, sys
nnp = [l.split()[1] for l in open("/proc/self/status") if l.startswith("NoNewPrivs:")][0]
info = "VERIFIED_MCP_TOOL uid=%d nnp=%s" % (os.getuid(), nnp)
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg.get("method") == "initialize":
        res = {"protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
               "capabilities": {"tools": {}}, "serverInfo": {"name": "verified", "version": "1"}}
    elif msg.get("method") == "tools/list":
        res = {"tools": [{"name": "verified_probe", "description": info,
                          "inputSchema": {"type": "object", "properties": {}}}]}
    else:
        res = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": res}) + "\n")
    sys.stdout.flush()
"#,
    )
    .unwrap();
    let yaml = fs::read_to_string(&fx.harness).unwrap() + "plugins:\n  - plugins/probe-codex\n";
    fs::write(&fx.harness, yaml).unwrap();
}

/// What iteration 1 plants to have Codex load a plugin of its own in iteration 2: a marketplace
/// and plugin in the repository and in `HOME`, a project config enabling it, and (refused: the
/// supervisor's, root's) a plugin in `CODEX_HOME`'s cache and a `config.toml` enabling it.
const PLANT_PLUGIN: &str = r#"plugin() { mkdir -p "$1/.codex-plugin" "$1/skills/planted"; echo '{"name": "planted"}' > "$1/.codex-plugin/plugin.json"; printf -- '---\nname: planted\ndescription: PLANTED_PLUGIN_SKILL\n---\nx\n' > "$1/skills/planted/SKILL.md"; echo '{"mcpServers": {"plantedmcp": {"command": "sh", "args": ["-c", "echo PLANTED_MCP_RAN > /tmp/planted-mcp"]}}}' > "$1/.mcp.json"; }
market='{"name": "planted-market", "plugins": [{"name": "planted", "source": {"source": "local", "path": "./plugins/planted"}}]}'
plugin plugins/planted; mkdir -p .agents/plugins; echo "$market" > .agents/plugins/marketplace.json
mkdir -p .codex; printf '[plugins."planted@planted-market"]\nenabled = true\n' > .codex/config.toml
plugin "$HOME/plugins/planted"; mkdir -p "$HOME/.agents/plugins"; echo "$market" > "$HOME/.agents/plugins/marketplace.json"
plugin "$CODEX_HOME/plugins/cache/pitcrew/planted/local" 2>/dev/null || echo "codex-home cache refused"
printf '[plugins."planted@pitcrew"]\nenabled = true\n' >> "$CODEX_HOME/config.toml" 2>/dev/null || echo "config.toml refused"
plugin "$CODEX_HOME/plugins/cache/pitcrew/probe-codex/0-planted" 2>/dev/null || echo "version dir refused"
echo planted"#;

/// A verified Codex plugin is loaded from the copy the supervisor made in Codex's plugin cache:
/// its MCP server runs as the agent's uid under pitcrew's confinement and its tool reaches the
/// model; its skill does not (Codex's skill list stays off). The record names the plugin.
/// What iteration 1 plants (a marketplace and plugin in the repository and `HOME`, a project
/// config enabling it, writes to `CODEX_HOME`'s cache and `config.toml`, refused) loads nothing
/// in iteration 2, where the verified plugin's tool is there again.
#[test]
fn attack_leftovers__a_plugin_planted_by_codex_never_loads_and_the_verified_one_does() {
    if !gate() {
        return;
    }
    let server = ModelServer::start(one_command_per_iteration(
        "exec_command",
        &[PLANT_PLUGIN, "echo second"],
        exec,
    ));
    let fx = fixture(&server, 2);
    add_codex_plugin(&fx);
    let (code, doc) = fx.run_status();
    assert_eq!(code, Some(0), "{doc:#}");
    let requests = server.requests();
    assert_eq!(requests.len(), 4, "{requests:#?}");
    let planted = last_tool_result(&requests[1]).unwrap_or_default();
    assert!(planted.lines().any(|l| l == "planted"), "{planted}");
    for refused in [
        "codex-home cache refused",
        "config.toml refused",
        "version dir refused",
    ] {
        assert!(planted.contains(refused), "{planted}");
    }
    for (i, request) in requests.iter().enumerate() {
        let tools = request["tools"].to_string();
        assert!(
            tools.contains("VERIFIED_MCP_TOOL uid=65534 nnp=1"),
            "{i}: {tools}"
        );
        let all = format!("{}\n{tools}", model_visible(request));
        assert!(!all.contains("VERIFIED_PLUGIN_SKILL"), "{i}: {all}");
        if i >= 2 {
            assert!(
                !all.contains("PLANTED_") && !all.contains("plantedmcp"),
                "{i}: {all}"
            );
        }
    }
    for n in [1, 2] {
        let record = read_json(&iteration_dir(&doc, n).join("result.json"));
        assert_eq!(
            record["codex_config"]["plugins"],
            json!(["probe-codex@pitcrew"]),
            "{record:#}"
        );
        let argv = record["agent"]["argv"].to_string();
        assert!(
            !argv.contains("--ignore-user-config") && !argv.contains("\"plugins\""),
            "{argv}"
        );
    }
}

/// A verified Codex plugin's hook (`hooks/hooks.json`) runs, as the agent's uid, without a
/// pinned `hooks.json`: it blocks the command the model asks for, and Codex tells the model why.
#[test]
fn a_verified_codex_plugins_hook_blocks_a_command_and_codex_hears_why() {
    if !gate() {
        return;
    }
    let server = ModelServer::start(one_command_per_iteration(
        "exec_command",
        &["echo PLUGIN_FORBIDDEN"],
        exec,
    ));
    let fx = fixture(&server, 1);
    add_codex_plugin(&fx);
    let (code, doc) = fx.run_status();
    assert_eq!(code, Some(0), "{doc:#}");
    let requests = server.requests();
    let heard = last_tool_result(requests.last().unwrap()).unwrap_or_default();
    assert!(
        heard.contains("blocked by the plugin's hook uid=65534"),
        "{heard}"
    );
}

/// The real Codex CLI of the production image (`scripts/build-image codex`: its static binary
/// from the npm package inside the image, nothing of the host's mounted) in a container podman
/// creates without a network: two iterations against the model server on the host, reached
/// through pitcrew with the harness's default network (`OPENAI_BASE_URL`'s `127.0.0.1:PORT`),
/// the API key passed by name and kept on the host, the command run as the agent's uid under
/// `NoNewPrivs` and pitcrew's seccomp filter, and no container left afterwards.
#[test]
fn codex_in_the_production_image_under_podman() {
    if !engines::require(Kind::Podman) {
        return;
    }
    let server = ModelServer::start(one_command_per_iteration(
        "exec_command",
        &[PROBE, PROBE],
        exec,
    ));
    server.require_key(KEY);
    let fx = fixture(&server, 2);
    let engine = Engine::start(Kind::Podman);
    let image = engine.image("codex");
    let env = engine.env_with(&[("OPENAI_API_KEY", KEY)]);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let doc = pitcrew_run(
        &fx.harness,
        &fx.state,
        &[
            "--engine",
            "podman",
            "--image",
            &image,
            "--pass-env",
            "OPENAI_API_KEY",
        ],
        &env,
    );
    assert_eq!(doc["exit_code"], 0, "{doc:#}");
    let requests = server.requests();
    assert_eq!(requests.len(), 4, "{requests:#?}");
    for n in [1, 2] {
        let probe = last_tool_result(&requests[2 * n - 1]).unwrap_or_default();
        assert!(
            probe.lines().any(|l| l == "65534"),
            "iteration {n}: {probe}"
        );
        assert!(!probe.contains(KEY), "iteration {n}: {probe}");
        assert!(probe.contains("NoNewPrivs:\t1"), "iteration {n}: {probe}");
        assert!(probe.contains("Seccomp:\t2"), "iteration {n}: {probe}");
        let record = read_json(&iteration_dir(&doc, n).join("result.json"));
        assert_eq!(record["exit_code"], 0, "{record:#}");
        assert_eq!(record["supervisor"]["mode"], "pid1", "{record:#}");
        assert_eq!(
            record["verification"]["agent"]["version"], CODEX_VERSION,
            "{record:#}"
        );
        let conns = record["network"]["connections"].as_array().cloned();
        let conns = conns.unwrap_or_default();
        assert!(
            !conns.is_empty()
                && conns.iter().all(|c| c["via"] == "model"
                    && c["allowed"] == true
                    && c["injected"] == json!(["OPENAI_API_KEY"])),
            "{record:#}"
        );
    }
    let id = doc["sandbox"].as_str().unwrap();
    assert!(!engine.has_container(id), "{id} was left");
}

/// Why `skills:` stays refused for Codex 0.169.1, run by hand outside pitcrew (`codex debug
/// prompt-input` prints what the model is given, and asks no model): with its skill list on, a
/// plugin's skill (Codex's only way to be given a skill from a place of pitcrew's) is listed
/// beside the skills a repository's `.codex/skills` and `.agents/skills` hold, and
/// `[[skills.config]]` naming those directories turns none of them off; with the list off
/// (`skills.include_instructions=false`, as pitcrew runs it) none is listed.
#[test]
fn control_codex_lists_a_repositorys_skills_beside_a_plugins_whenever_its_skill_list_is_on() {
    if !gate() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (home, codex_home, repo) = (
        dir.path().join("home"),
        dir.path().join("codex-home"),
        dir.path().join("repo"),
    );
    let skill = |at: PathBuf, name: &str, marker: &str| {
        fs::create_dir_all(at.join(name)).unwrap();
        fs::write(
            at.join(name).join("SKILL.md"),
            format!("---\nname: {name}\ndescription: {marker}\n---\nbody\n"),
        )
        .unwrap();
    };
    let plugin = codex_home.join("plugins/cache/pitcrew/given/local");
    fs::create_dir_all(plugin.join(".codex-plugin")).unwrap();
    fs::write(
        plugin.join(".codex-plugin/plugin.json"),
        r#"{"name": "given"}"#,
    )
    .unwrap();
    skill(plugin.join("skills"), "given", "GIVEN_PLUGIN_SKILL");
    skill(repo.join(".codex/skills"), "repo-codex", "REPO_CODEX_SKILL");
    skill(
        repo.join(".agents/skills"),
        "repo-agents",
        "REPO_AGENTS_SKILL",
    );
    fs::create_dir_all(&home).unwrap();
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&repo)
        .status()
        .unwrap();
    assert!(git.success());
    let config = format!(
        "[plugins.\"given@pitcrew\"]\nenabled = true\n\
         [[skills.config]]\npath = \"{0}/.codex/skills\"\nenabled = false\n\
         [[skills.config]]\npath = \"{0}/.agents/skills\"\nenabled = false\n",
        repo.display()
    );
    fs::write(codex_home.join("config.toml"), config).unwrap();
    let listed = |extra: &[&str]| -> String {
        let out = std::process::Command::new("codex")
            .args([
                "debug",
                "prompt-input",
                "-c",
                "skills.bundled.enabled=false",
            ])
            .args(extra)
            .arg("hi")
            .current_dir(&repo)
            .env("HOME", &home)
            .env("CODEX_HOME", &codex_home)
            .env("HTTPS_PROXY", "http://127.0.0.1:9")
            .env("HTTP_PROXY", "http://127.0.0.1:9")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let on = listed(&[]);
    for marker in [
        "GIVEN_PLUGIN_SKILL",
        "REPO_CODEX_SKILL",
        "REPO_AGENTS_SKILL",
    ] {
        assert!(on.contains(marker), "{marker}: {on}");
    }
    let off = listed(&["-c", "skills.include_instructions=false"]);
    assert!(!off.contains("_SKILL"), "{off}");
}

/// What the agent's first command plants: a `grep` that finds nothing, in the directory Codex
/// 0.169.1 made for its `apply_patch` aliases (`$CODEX_HOME/tmp/arg0-linux/codex-arg0*`, the
/// agent's uid's) and put first on its own `PATH`, which its hooks inherit.
const SHADOW_GREP: &str = r#"for d in "$CODEX_HOME"/tmp/*/codex-arg0*; do printf '#!/bin/sh\nexit 1\n' > "$d/grep" && chmod +x "$d/grep" && echo "shadowed $d"; done; echo planted"#;

/// The agent shadows `grep` in the `PATH` entry Codex gives its hooks, then runs a command the
/// verified plugin's hook blocks: the hook must still block it.
#[test]
fn attack_runtime_tamper__a_command_the_agent_puts_on_codexs_path_never_changes_a_verified_plugins_hook(
) {
    if !gate() {
        return;
    }
    let server = ModelServer::start(steps(&[
        SHADOW_GREP,
        "mkdir -p output; echo PLUGIN_FORBIDDEN > output/proof",
    ]));
    let fx = fixture(&server, 1);
    add_codex_plugin(&fx);
    let (code, doc) = fx.run_status();
    let it = iteration_dir(&doc, 1);
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "{code:?} {requests:#?}");
    let planted = last_tool_result(&requests[1]).unwrap_or_default();
    assert!(planted.contains("planted"), "{planted}");
    let blocked = last_tool_result(&requests[2]).unwrap_or_default();
    assert!(
        blocked.contains("blocked by the plugin's hook"),
        "planted: {planted}\nheard: {blocked}"
    );
    assert!(!it.join("output/proof").exists(), "planted: {planted}");
}

/// The same with a pinned `hooks.json`: Codex's `PATH` entry is the agent's to fill.
#[test]
fn attack_runtime_tamper__a_command_the_agent_puts_on_codexs_path_never_changes_a_pinned_hook() {
    if !gate() {
        return;
    }
    let server = ModelServer::start(steps(&[
        SHADOW_GREP,
        "mkdir -p output; echo FORBIDDEN > output/proof",
    ]));
    let fx = fixture(&server, 1);
    pin_blocking_hooks(&fx);
    let (code, doc) = fx.run_status();
    let it = iteration_dir(&doc, 1);
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "{code:?} {requests:#?}");
    let planted = last_tool_result(&requests[1]).unwrap_or_default();
    assert!(planted.contains("planted"), "{planted}");
    let blocked = last_tool_result(&requests[2]).unwrap_or_default();
    assert!(
        blocked.contains("blocked by the verified hook"),
        "planted: {planted}\nheard: {blocked}"
    );
    assert!(!it.join("output/proof").exists(), "planted: {planted}");
}

/// A verified plugin whose hook names its script relatively (`./hooks/check.sh`, as the
/// plugin's own tree lays it out): Codex 0.169.1 runs hooks in the session's directory, the
/// workspace, so the agent writes `hooks/check.sh` there and its script answers for the verified
/// one. `pitcrew run` must refuse such a plugin, or the verified script must be what runs.
#[test]
fn attack_harness__a_codex_plugin_hook_naming_its_script_relatively_never_runs_what_the_agent_wrote(
) {
    if !gate() {
        return;
    }
    let server = ModelServer::start(steps(&[
        r#"mkdir -p hooks output; printf '#!/bin/sh\necho AGENT_HOOK_RAN >> output/agenthook\nexit 0\n' > hooks/check.sh; chmod +x hooks/check.sh; echo planted"#,
        "mkdir -p output; echo PLUGIN_FORBIDDEN > output/proof",
    ]));
    let fx = fixture(&server, 1);
    add_codex_plugin(&fx);
    let root = fx.harness.parent().unwrap().join("plugins/probe-codex");
    fs::write(
        root.join("hooks/check.sh"),
        "#!/bin/sh\nif grep -q PLUGIN_FORBIDDEN; then echo \"blocked by the plugin's hook\" >&2; exit 2; fi\n",
    )
    .unwrap();
    fs::set_permissions(
        root.join("hooks/check.sh"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let hooks = json!({"hooks": {"PreToolUse": [{"matcher": ".*", "hooks": [{
        "type": "command",
        "command": "./hooks/check.sh",
    }]}]}});
    fs::write(root.join("hooks/hooks.json"), hooks.to_string()).unwrap();
    let (code, doc) = fx.run_status();
    let requests = server.requests();
    if requests.is_empty() {
        assert_ne!(code, Some(0), "{doc:#}");
        return;
    }
    let it = iteration_dir(&doc, 1);
    let ran = fs::read_to_string(it.join("output/agenthook")).unwrap_or_default();
    assert!(
        ran.is_empty(),
        "the agent's hooks/check.sh ran as the verified hook: {ran}"
    );
    assert!(!it.join("output/proof").exists());
}

/// A verified plugin's hook that keeps state in its data dir (`$PLUGIN_DATA`, which Codex
/// 0.169.1 sets to `$CODEX_HOME/plugins/data/<name>-<marketplace>`) must still block: under
/// pitcrew `plugins/` is root's, so the hook's `mkdir` failed, the hook exited 1, and Codex, which
/// takes a failed hook as no objection, ran the command it had to block.
#[test]
fn a_verified_codex_plugins_hook_keeping_state_in_its_data_dir_still_blocks() {
    if !gate() {
        return;
    }
    let server = ModelServer::start(steps(&[
        "mkdir -p output; echo PLUGIN_FORBIDDEN > output/proof",
    ]));
    let fx = fixture(&server, 1);
    add_codex_plugin(&fx);
    let root = fx.harness.parent().unwrap().join("plugins/probe-codex");
    let hooks = json!({"hooks": {"PreToolUse": [{"matcher": ".*", "hooks": [{
        "type": "command",
        "command": "mkdir -p \"$PLUGIN_DATA\" && date >> \"$PLUGIN_DATA/seen\" && if grep -q PLUGIN_FORBIDDEN; then echo \"blocked by the plugin's hook\" >&2; exit 2; fi",
    }]}]}});
    fs::write(root.join("hooks/hooks.json"), hooks.to_string()).unwrap();
    let (code, doc) = fx.run_status();
    let requests = server.requests();
    let heard = last_tool_result(requests.last().unwrap()).unwrap_or_default();
    assert!(
        heard.contains("blocked by the plugin's hook"),
        "{code:?} {heard}"
    );
    assert!(!iteration_dir(&doc, 1).join("output/proof").exists());
}
