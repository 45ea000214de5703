//! The real OpenCode 1.18.33 (npm `opencode-ai`, installed by `scripts/install-opencode` into
//! `$PITCREW_AGENTS_DIR/opencode-1.18.33`), run directly, without pitcrew: what the release reads,
//! loads and contacts on its own (docs/agent-support.md, "What OpenCode 1.18.33 does on its own").
//! `tests/tests/opencode_runtime.rs` runs it as pitcrew's `runtime: opencode`.
//!
//! Each run is offline and proven so: the test thread enters a network namespace of its own with
//! only `lo` (up), starts the scripted model server of `pitcrew_e2e::model_server` there, and
//! starts OpenCode from it, so OpenCode has no route off the machine. The model server is also
//! OpenCode's `HTTP(S)_PROXY` (`NO_PROXY=127.0.0.1`): every host OpenCode tries to reach shows as a
//! request (a `CONNECT host:443`) the server records, so a run that asserts "no outbound" sees
//! the attempts, not only their failure. [`the_canary_sees_what_the_release_fetches_at_start`]
//! is the control.
//!
//! The tests assert what the release does today (what it reads, loads, runs and contacts, the
//! JSON events a judge reads), so a release bump that changes any of it fails here.
//!
//! Needs root (a network namespace), `ip` (iproute2) and the install; skipped otherwise, or a
//! failure with `PITCREW_REQUIRE_E2E=1`.

use pitcrew_e2e::model_server::{last_tool_result, ModelServer, Reply};
use pitcrew_e2e::{busy_wait, prerequisite};
use serde_json::{json, Value};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The release these tests pin (`PITCREW_OPENCODE_VERSION` of `scripts/install-opencode`).
const VERSION: &str = "1.18.33";

/// `$PITCREW_AGENTS_DIR/opencode-<VERSION>` (default `/opt/pitcrew-agents`).
fn prefix() -> PathBuf {
    let agents =
        std::env::var("PITCREW_AGENTS_DIR").unwrap_or_else(|_| "/opt/pitcrew-agents".into());
    Path::new(&agents).join(format!("opencode-{VERSION}"))
}

/// The installed binary when it is the pinned release, and the machine can run the tests.
fn gate() -> Option<PathBuf> {
    let binary = prefix().join("bin/opencode");
    let version = Command::new(&binary)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let installed = version.as_deref() == Some(VERSION);
    let ip = Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    // SAFETY: geteuid has no preconditions and touches no memory of ours.
    let root = unsafe { libc::geteuid() } == 0;
    (prerequisite(
        installed,
        &format!(
            "needs OpenCode {VERSION} at {} (scripts/install-agents installs it; found {version:?})",
            binary.display()
        ),
    ) && prerequisite(
        root && ip,
        "needs root (a network namespace per run) and `ip` (iproute2)",
    ))
    .then_some(binary)
}

/// A temporary tree for one test: `<root>/home` (HOME), `<root>/proj` (the working directory, no
/// git repository: OpenCode then looks for instruction files up to `/`).
struct Lab {
    root: tempfile::TempDir,
}

impl Lab {
    fn new() -> Lab {
        let lab = Lab {
            root: tempfile::tempdir().expect("tempdir"),
        };
        fs::create_dir_all(lab.home().join(".config/opencode")).unwrap();
        fs::create_dir_all(lab.proj()).unwrap();
        lab
    }
    fn root(&self) -> &Path {
        self.root.path()
    }
    fn home(&self) -> PathBuf {
        self.root().join("home")
    }
    fn proj(&self) -> PathBuf {
        self.root().join("proj")
    }
    /// Writes `text` at `path` (relative to the lab's root), parents created.
    fn put(&self, path: &str, text: &str) {
        let path = self.root().join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    /// Makes the config dir `dir` (relative to the root) what OpenCode's start-up install of
    /// `@opencode-ai/plugin` skips: the install's `package.json` and `package-lock.json`, and
    /// its `node_modules` (a link to the one of `plugin-seed/`).
    fn seed(&self, dir: &str) {
        let (seed, dir) = (prefix().join("plugin-seed"), self.root().join(dir));
        fs::create_dir_all(&dir).unwrap();
        for file in ["package.json", "package-lock.json"] {
            fs::copy(seed.join(file), dir.join(file)).expect("plugin-seed file");
        }
        std::os::unix::fs::symlink(seed.join("node_modules"), dir.join("node_modules")).unwrap();
    }
    /// Whether a marker file `ran-<name>` (a plugin's or a command's) exists in the root.
    fn ran(&self, name: &str) -> bool {
        self.root().join(format!("ran-{name}")).exists()
    }
}

/// What one run of `opencode run --format json` did.
struct Outcome {
    code: Option<i32>,
    /// Its JSON events (stdout lines).
    events: Vec<Value>,
    stderr: String,
    /// The model requests, in arrival order.
    requests: Vec<Value>,
    /// The `Host` of every request that was not to the model server itself (proxy `CONNECT`s).
    outbound: Vec<String>,
    /// `ip -o link` in the run's network namespace.
    links: String,
}

impl Outcome {
    /// Whether `marker` occurs anywhere in a model request (system prompt, tool descriptions).
    fn told(&self, marker: &str) -> bool {
        self.requests.iter().any(|r| r.to_string().contains(marker))
    }
    fn events_of(&self, kind: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["type"] == kind).collect()
    }
    /// The requests that offered tools or came after a tool result: the agent's turns, not the
    /// title generator's.
    fn agent_requests(&self) -> Vec<&Value> {
        self.requests
            .iter()
            .filter(|r| !is_title_request(r))
            .collect()
    }
}

/// OpenCode's request for a session title (a system prompt of its own, no tools).
fn is_title_request(request: &Value) -> bool {
    request["messages"][0]["content"]
        .as_str()
        .is_some_and(|s| s.starts_with("You are a title generator"))
}

/// `script` for the agent's turns; the title generator gets a title.
fn with_titles(
    script: impl Fn(&Value) -> Reply + Send + Sync + 'static,
) -> impl Fn(&Value) -> Reply + Send + Sync + 'static {
    move |request| {
        if is_title_request(request) {
            Reply::Text("A title".into())
        } else {
            script(request)
        }
    }
}

/// What a run is given besides the lab.
#[derive(Default)]
struct Setup<'a> {
    /// Extra variables (beside HOME, PATH, the proxy and `OPENCODE_CONFIG_CONTENT`).
    env: Vec<(&'a str, String)>,
    /// Extra top-level keys of `OPENCODE_CONFIG_CONTENT`.
    config: Value,
    /// Extra arguments of `opencode run` (before the message).
    args: Vec<&'a str>,
    /// Leave out `OPENCODE_DISABLE_MODELS_FETCH=1`.
    models_fetch: bool,
    /// `PATH` instead of `/usr/bin:/bin`.
    path: Option<String>,
}

/// Runs `opencode run --format json <args> "say hi"` in `lab` against a model server answering
/// with `script`, in a network namespace of its own (see the module documentation).
fn run(
    binary: &Path,
    lab: &Lab,
    setup: Setup<'_>,
    script: impl Fn(&Value) -> Reply + Send + Sync + 'static,
) -> Outcome {
    std::thread::scope(|s| {
        s.spawn(|| run_in_private_net(binary, lab, setup, with_titles(script)))
            .join()
            .expect("run thread")
    })
}

fn run_in_private_net(
    binary: &Path,
    lab: &Lab,
    setup: Setup<'_>,
    script: impl Fn(&Value) -> Reply + Send + Sync + 'static,
) -> Outcome {
    // SAFETY: unshare(CLONE_NEWNET) moves only this thread (and what it starts afterwards:
    // sockets, children) into a new network namespace; it touches no memory of ours.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    assert_eq!(
        rc,
        0,
        "unshare(CLONE_NEWNET): {}",
        std::io::Error::last_os_error()
    );
    let up = Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .status();
    assert!(up.is_ok_and(|s| s.success()), "ip link set lo up");
    let links = Command::new("ip").args(["-o", "link"]).output().unwrap();
    let links = String::from_utf8_lossy(&links.stdout).into_owned();
    let server = ModelServer::start(script);
    let own = server.origin().trim_start_matches("http://").to_string();
    let mut config = json!({
        "provider": {"mock": {
            "npm": "@ai-sdk/openai-compatible",
            "options": {"baseURL": server.base_url(), "apiKey": "placeholder-key"},
            "models": {"m": {"tool_call": true}},
        }},
        "model": "mock/m",
    });
    if let Value::Object(extra) = setup.config {
        config.as_object_mut().unwrap().extend(extra);
    }
    let stdout = lab.root().join("stdout.jsonl");
    let mut cmd = Command::new(binary);
    cmd.arg("run")
        .args(["--format", "json"])
        .args(&setup.args)
        .arg("say hi")
        .current_dir(lab.proj())
        .env_clear()
        .env("HOME", lab.home())
        .env("PATH", setup.path.as_deref().unwrap_or("/usr/bin:/bin"))
        .env("OPENCODE_CONFIG_CONTENT", config.to_string())
        .stdin(Stdio::null())
        .stdout(fs::File::create(&stdout).unwrap())
        .stderr(Stdio::piped());
    for var in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        cmd.env(var, server.origin());
    }
    cmd.env("NO_PROXY", "127.0.0.1")
        .env("no_proxy", "127.0.0.1");
    if !setup.models_fetch {
        cmd.env("OPENCODE_DISABLE_MODELS_FETCH", "1");
    }
    cmd.envs(setup.env.iter().map(|(k, v)| (k, v)));
    let mut child = cmd.spawn().expect("spawn opencode");
    // A guard, not an assertion on time: a hung OpenCode fails the test instead of the suite.
    let mut status = None;
    busy_wait(Duration::from_secs(300), || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if status.is_none() {
        let _ = child.kill();
        status = child.wait().ok();
    }
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    let events = fs::read_to_string(&stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("event {l}: {e}")))
        .collect();
    let outbound = server
        .headers()
        .iter()
        .filter_map(|h| h.iter().find(|(n, _)| n == "host").map(|(_, v)| v.clone()))
        .filter(|host| *host != own)
        .collect();
    Outcome {
        code: status.and_then(|s| s.code()),
        events,
        stderr,
        requests: server.requests(),
        outbound,
        links,
    }
}

/// A script that answers every agent turn with text.
fn text(_: &Value) -> Reply {
    Reply::Text("hello from the scripted model".into())
}

/// A run with the seeded config dir and the switches of [`Setup::default`] (models fetch off).
fn quiet_lab() -> Lab {
    let lab = Lab::new();
    lab.seed("home/.config/opencode");
    lab
}

fn assert_offline(out: &Outcome) {
    let lines: Vec<&str> = out.links.lines().collect();
    assert!(
        lines.len() == 1 && lines[0].contains(": lo:"),
        "the run's network namespace has only lo: {}",
        out.links
    );
    assert_eq!(
        out.outbound,
        Vec::<String>::new(),
        "hosts OpenCode tried to reach"
    );
}

/// A script that calls `bash` with `command`, then answers the tool's result with text quoting it.
fn bash_then_text(command: String) -> impl Fn(&Value) -> Reply + Send + Sync + 'static {
    tool_then_text(
        "bash",
        json!({"command": command, "description": "a command"}),
    )
}

/// A script that calls the tool `name` with `arguments`, then answers the tool's result with
/// text quoting it.
fn tool_then_text(
    name: &'static str,
    arguments: Value,
) -> impl Fn(&Value) -> Reply + Send + Sync + 'static {
    move |request| match last_tool_result(request) {
        Some(result) => Reply::Text(format!("the tool said: {result}")),
        None => Reply::ToolCall {
            name: name.into(),
            arguments: arguments.clone(),
        },
    }
}

#[test]
fn opencode_runs_a_bash_call_offline_and_hears_its_output() {
    let Some(bin) = gate() else { return };
    let lab = quiet_lab();
    let out = run(
        &bin,
        &lab,
        Setup::default(),
        bash_then_text("echo tool-$((6*7))".into()),
    );
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_offline(&out);
    let tools = out.events_of("tool_use");
    assert_eq!(tools.len(), 1, "events: {:?}", out.events);
    let part = &tools[0]["part"];
    assert_eq!(
        (part["type"].as_str(), part["tool"].as_str()),
        (Some("tool"), Some("bash"))
    );
    assert_eq!(part["state"]["status"], "completed");
    assert_eq!(part["state"]["input"]["command"], "echo tool-$((6*7))");
    assert_eq!(part["state"]["output"], "tool-42\n");
    assert_eq!(part["state"]["metadata"]["exit"], 0);
    // The model heard the output, and its answer is the last text event.
    let agent = out.agent_requests();
    assert_eq!(agent.len(), 2);
    assert_eq!(last_tool_result(agent[1]).as_deref(), Some("tool-42\n"));
    let texts = out.events_of("text");
    assert_eq!(
        texts.last().unwrap()["part"]["text"],
        "the tool said: tool-42\n"
    );
    // Every event: {type, timestamp, sessionID, part}.
    for event in &out.events {
        assert!(
            event["timestamp"].is_u64() && event["sessionID"].is_string(),
            "{event}"
        );
    }
}

#[test]
fn a_model_error_exits_1_with_one_error_event() {
    let Some(bin) = gate() else { return };
    let lab = quiet_lab();
    // A 400 whose text matches none of OpenCode's retry patterns (a 5xx, "server_error",
    // "rate limit", ... are retried 5 times with a backoff from 2 s).
    let out = run(&bin, &lab, Setup::default(), |_| Reply::Error {
        status: 400,
        message: "scripted refusal".into(),
    });
    assert_eq!(out.code, Some(1), "stderr: {}", out.stderr);
    assert_offline(&out);
    assert_eq!(out.agent_requests().len(), 1, "a 400 is not retried");
    let errors = out.events_of("error");
    assert_eq!(errors.len(), 1, "events: {:?}", out.events);
    let error = &errors[0]["error"];
    assert_eq!(error["name"], "APIError");
    assert_eq!(error["data"]["statusCode"], 400);
    assert_eq!(error["data"]["isRetryable"], false);
    assert_eq!(error["data"]["message"], "scripted refusal");
    assert!(out.events_of("step_finish").is_empty(), "{:?}", out.events);
}

#[test]
fn token_usage_is_in_each_step_finish() {
    let Some(bin) = gate() else { return };
    let lab = quiet_lab();
    let out = run(&bin, &lab, Setup::default(), text);
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    // stream_options.include_usage is asked for; the usage chunk of the scripted server
    // (10 prompt tokens of which 3 cached, 5 completion) becomes the step's tokens.
    let agent = out.agent_requests();
    assert_eq!(agent[0]["stream_options"], json!({"include_usage": true}));
    let steps = out.events_of("step_finish");
    assert_eq!(steps.len(), 1, "events: {:?}", out.events);
    let part = &steps[0]["part"];
    assert_eq!(part["type"], "step-finish");
    assert_eq!(part["reason"], "stop");
    assert_eq!(
        part["tokens"],
        json!({"total": 15, "input": 7, "output": 5, "reasoning": 0,
               "cache": {"write": 0, "read": 3}})
    );
    assert_eq!(part["cost"], 0);
}

#[test]
fn the_canary_sees_what_the_release_fetches_at_start() {
    let Some(bin) = gate() else { return };
    // No seeded config dir, the models fetch on: the proxy sees both.
    let lab = Lab::new();
    let setup = Setup {
        models_fetch: true,
        ..Setup::default()
    };
    let out = run(&bin, &lab, setup, text);
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let mut hosts = out.outbound.clone();
    hosts.sort();
    hosts.dedup();
    assert_eq!(hosts, ["models.opencode.ai:443", "registry.npmjs.org:443"]);
    // What the failed install left: the .gitignore OpenCode writes into every config dir.
    assert!(lab.home().join(".config/opencode/.gitignore").is_file());
    assert!(!lab.home().join(".config/opencode/node_modules").exists());
    // A project .opencode dir is a config dir too: unseeded, it is installed into.
    let lab = quiet_lab();
    lab.put("proj/.opencode/opencode.json", "{}");
    let mut out = run(&bin, &lab, Setup::default(), text);
    out.outbound.dedup();
    assert_eq!(out.outbound, ["registry.npmjs.org:443"]);
    // ...unless project config is off.
    let setup = Setup {
        env: vec![("OPENCODE_DISABLE_PROJECT_CONFIG", "1".into())],
        ..Setup::default()
    };
    let out = run(&bin, &lab, setup, text);
    assert_offline(&out);
}

/// Plants one instruction file per place OpenCode 1.18.33 looks, each with its own marker.
fn plant_instructions(lab: &Lab, agents_md: bool) {
    if agents_md {
        lab.put("AGENTS.md", "MARK_parent_agents"); // the parent of the (non-git) cwd
        lab.put("proj/AGENTS.md", "MARK_proj_agents");
        lab.put("home/.config/opencode/AGENTS.md", "MARK_config_agents");
    }
    lab.put("proj/CLAUDE.md", "MARK_proj_claude");
    lab.put("proj/CONTEXT.md", "MARK_proj_context");
    lab.put("home/.claude/CLAUDE.md", "MARK_home_claude");
}

fn told(out: &Outcome, markers: &[&str]) -> Vec<String> {
    markers
        .iter()
        .filter(|m| out.told(m))
        .map(|m| (*m).to_string())
        .collect()
}

const INSTRUCTION_MARKERS: [&str; 6] = [
    "MARK_parent_agents",
    "MARK_proj_agents",
    "MARK_config_agents",
    "MARK_proj_claude",
    "MARK_proj_context",
    "MARK_home_claude",
];

#[test]
fn instruction_files_reach_the_model_and_the_switches_that_drop_them() {
    let Some(bin) = gate() else { return };
    let env = |vars: &[&'static str]| Setup {
        env: vars.iter().map(|v| (*v, "1".to_string())).collect(),
        ..Setup::default()
    };
    // The first name of AGENTS.md, CLAUDE.md, CONTEXT.md found from the cwd up to / (every
    // directory's file of that name), and the first of ~/.config/opencode/AGENTS.md,
    // ~/.claude/CLAUDE.md.
    let lab = quiet_lab();
    plant_instructions(&lab, true);
    let out = run(&bin, &lab, Setup::default(), text);
    assert_eq!(
        told(&out, &INSTRUCTION_MARKERS),
        [
            "MARK_parent_agents",
            "MARK_proj_agents",
            "MARK_config_agents"
        ]
    );
    // OPENCODE_DISABLE_PROJECT_CONFIG drops the project's (and its parents') files.
    let out = run(&bin, &lab, env(&["OPENCODE_DISABLE_PROJECT_CONFIG"]), text);
    assert_eq!(told(&out, &INSTRUCTION_MARKERS), ["MARK_config_agents"]);
    // Without any AGENTS.md: CLAUDE.md in the project and in ~/.claude.
    let lab = quiet_lab();
    plant_instructions(&lab, false);
    let out = run(&bin, &lab, Setup::default(), text);
    assert_eq!(
        told(&out, &INSTRUCTION_MARKERS),
        ["MARK_proj_claude", "MARK_home_claude"]
    );
    // OPENCODE_DISABLE_CLAUDE_CODE drops both CLAUDE.md: CONTEXT.md is next.
    let out = run(&bin, &lab, env(&["OPENCODE_DISABLE_CLAUDE_CODE"]), text);
    assert_eq!(told(&out, &INSTRUCTION_MARKERS), ["MARK_proj_context"]);
    assert_offline(&out);
}

const SKILL_PLACES: [(&str, &str); 7] = [
    ("home/.claude/skills", "sk_home_claude"),
    ("home/.agents/skills", "sk_home_agents"),
    ("home/.config/opencode/skills", "sk_config"),
    ("proj/.opencode/skills", "sk_proj_opencode"),
    ("proj/.opencode/skill", "sk_proj_opencode_singular"),
    ("proj/.claude/skills", "sk_proj_claude"),
    ("proj/.agents/skills", "sk_proj_agents"),
];

#[test]
fn skills_from_every_place_reach_the_model_and_the_switches_that_drop_them() {
    let Some(bin) = gate() else { return };
    let lab = quiet_lab();
    lab.seed("proj/.opencode");
    for (dir, name) in SKILL_PLACES {
        lab.put(
            &format!("{dir}/{name}/SKILL.md"),
            &format!("---\nname: {name}\ndescription: MARK_{name}\n---\nbody\n"),
        );
    }
    let markers: Vec<String> = SKILL_PLACES
        .iter()
        .map(|(_, n)| format!("MARK_{n}"))
        .collect();
    let markers: Vec<&str> = markers.iter().map(String::as_str).collect();
    let out = run(&bin, &lab, Setup::default(), text);
    assert_offline(&out);
    assert_eq!(told(&out, &markers), markers, "every place loads");
    let with = |var: &'static str| Setup {
        env: vec![(var, "1".into())],
        ..Setup::default()
    };
    // External skills (.claude, .agents; home and project) off: the config dirs' remain.
    let out = run(&bin, &lab, with("OPENCODE_DISABLE_EXTERNAL_SKILLS"), text);
    assert_eq!(
        told(&out, &markers),
        [
            "MARK_sk_config",
            "MARK_sk_proj_opencode",
            "MARK_sk_proj_opencode_singular"
        ]
    );
    // Project config off drops .opencode but NOT the project's .claude and .agents skills.
    let out = run(&bin, &lab, with("OPENCODE_DISABLE_PROJECT_CONFIG"), text);
    assert_eq!(
        told(&out, &markers),
        [
            "MARK_sk_home_claude",
            "MARK_sk_home_agents",
            "MARK_sk_config",
            "MARK_sk_proj_claude",
            "MARK_sk_proj_agents"
        ]
    );
    // Claude Code compatibility off drops the .claude ones.
    let out = run(&bin, &lab, with("OPENCODE_DISABLE_CLAUDE_CODE"), text);
    assert!(!out.told("MARK_sk_home_claude") && !out.told("MARK_sk_proj_claude"));
    assert!(out.told("MARK_sk_home_agents"));
}

/// A plugin module that writes `ran-<name>` into the lab's root when OpenCode loads it.
fn plugin(lab: &Lab, path: &str, name: &str) {
    let marker = lab.root().join(format!("ran-{name}"));
    lab.put(
        path,
        &format!(
            "export const P = async () => {{ require(\"fs\").writeFileSync({:?}, \"1\"); return {{}} }}\n",
            marker.display().to_string()
        ),
    );
}

#[test]
fn plugin_modules_of_every_config_dir_execute_unless_pure() {
    let Some(bin) = gate() else { return };
    let plant = || {
        let lab = quiet_lab();
        lab.seed("proj/.opencode");
        lab.seed("home/.opencode");
        plugin(&lab, "proj/.opencode/plugins/a.ts", "proj_plugins_ts");
        plugin(&lab, "proj/.opencode/plugin/b.js", "proj_plugin_js");
        plugin(&lab, "home/.config/opencode/plugins/c.ts", "config_plugins");
        plugin(&lab, "home/.opencode/plugins/d.ts", "home_opencode_plugins");
        // The loader's glob is {plugin,plugins}/*.{ts,js}: no subdirectories, no .mjs.
        plugin(&lab, "proj/.opencode/plugins/sub/e.ts", "proj_subdir");
        plugin(&lab, "proj/.opencode/plugins/f.mjs", "proj_mjs");
        lab
    };
    let names = [
        "proj_plugins_ts",
        "proj_plugin_js",
        "config_plugins",
        "home_opencode_plugins",
        "proj_subdir",
        "proj_mjs",
    ];
    let ran = |lab: &Lab| -> Vec<&str> { names.into_iter().filter(|n| lab.ran(n)).collect() };
    let lab = plant();
    let out = run(&bin, &lab, Setup::default(), text);
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_offline(&out);
    assert_eq!(
        ran(&lab),
        [
            "proj_plugins_ts",
            "proj_plugin_js",
            "config_plugins",
            "home_opencode_plugins"
        ]
    );
    // --pure and OPENCODE_PURE=1: no plugin module runs.
    let lab = plant();
    let out = run(
        &bin,
        &lab,
        Setup {
            args: vec!["--pure"],
            ..Setup::default()
        },
        text,
    );
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(ran(&lab), Vec::<&str>::new());
    let lab = plant();
    let pure = Setup {
        env: vec![("OPENCODE_PURE", "1".into())],
        ..Setup::default()
    };
    run(&bin, &lab, pure, text);
    assert_eq!(ran(&lab), Vec::<&str>::new());
    // Project config off: the home ones still run.
    let lab = plant();
    let no_project = Setup {
        env: vec![("OPENCODE_DISABLE_PROJECT_CONFIG", "1".into())],
        ..Setup::default()
    };
    run(&bin, &lab, no_project, text);
    assert_eq!(ran(&lab), ["config_plugins", "home_opencode_plugins"]);
}

#[test]
fn config_files_agents_and_mcp_commands_load_from_every_layer() {
    let Some(bin) = gate() else { return };
    let lab = quiet_lab();
    let root = lab.root().display().to_string();
    let instructions = |path: &str, marker: &str| {
        lab.put(&format!("{marker}.md"), marker);
        lab.put(
            path,
            &json!({"instructions": [format!("{root}/{marker}.md")]}).to_string(),
        );
    };
    instructions("home/.config/opencode/opencode.json", "MARK_user_json");
    instructions("config-dir/opencode.json", "MARK_config_dir");
    // $OPENCODE_CONFIG_DIR is a config dir OpenCode installs @opencode-ai/plugin into too.
    lab.seed("config-dir");
    instructions("managed/opencode.json", "MARK_managed");
    // The project's opencode.json: an instruction file and a local MCP server, whose command
    // OpenCode starts at start-up.
    lab.put(
        "proj/opencode.json",
        &json!({
            "instructions": [format!("{root}/MARK_project_json.md")],
            "mcp": {"m": {"type": "local",
                          "command": ["sh", "-c", format!("touch {root}/ran-mcp; sleep 1")]}},
            // Config text substitutes {file:PATH} (relative to the file) and {env:NAME}.
            "agent": {"x": {"description": "{file:../secret.txt} {env:PITCREW_TEST_SECRET}",
                            "mode": "subagent", "prompt": "p"}},
        })
        .to_string(),
    );
    lab.put("MARK_project_json.md", "MARK_project_json");
    lab.put("secret.txt", "MARK_file_substituted");
    let agent = |path: &str, marker: &str| {
        lab.put(
            path,
            &format!("---\ndescription: {marker}\nmode: subagent\n---\nprompt\n"),
        );
    };
    agent("home/.config/opencode/agents/a.md", "MARK_config_agent");
    lab.seed("proj/.opencode");
    agent("proj/.opencode/agents/b.md", "MARK_project_agent");
    let markers = [
        "MARK_user_json",
        "MARK_config_dir",
        "MARK_managed",
        "MARK_project_json",
        "MARK_config_agent",
        "MARK_project_agent",
        "MARK_file_substituted",
        "MARK_env_substituted",
    ];
    let setup = |project: bool| Setup {
        env: [
            ("OPENCODE_CONFIG_DIR", format!("{root}/config-dir")),
            // /etc/opencode, redirected (a test hook of the release, honoured in 1.18.33).
            (
                "OPENCODE_TEST_MANAGED_CONFIG_DIR",
                format!("{root}/managed"),
            ),
            ("PITCREW_TEST_SECRET", "MARK_env_substituted".into()),
        ]
        .into_iter()
        .chain((!project).then(|| ("OPENCODE_DISABLE_PROJECT_CONFIG", "1".to_string())))
        .collect(),
        ..Setup::default()
    };
    let out = run(&bin, &lab, setup(true), text);
    assert_offline(&out);
    assert_eq!(told(&out, &markers), markers);
    assert!(lab.ran("mcp"), "the project's MCP command ran");
    fs::remove_file(lab.root().join("ran-mcp")).unwrap();
    let out = run(&bin, &lab, setup(false), text);
    assert_eq!(
        told(&out, &markers),
        [
            "MARK_user_json",
            "MARK_config_dir",
            "MARK_managed",
            "MARK_config_agent"
        ]
    );
    assert!(!lab.ran("mcp"));
}

/// The tool names of the agent's first request.
fn tools_offered(out: &Outcome) -> Vec<String> {
    let first = out.agent_requests()[0];
    first["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn tools_and_permission_config_decide_the_tools_offered() {
    let Some(bin) = gate() else { return };
    let lab = quiet_lab();
    let with = |config: Value| Setup {
        config,
        ..Setup::default()
    };
    let out = run(&bin, &lab, Setup::default(), text);
    assert_eq!(
        tools_offered(&out),
        [
            "bash",
            "edit",
            "glob",
            "grep",
            "read",
            "skill",
            "task",
            "todowrite",
            "webfetch",
            "write"
        ]
    );
    // `tools: {x: false}` is `permission: {x: deny}`; a denied tool is not offered.
    let out = run(
        &bin,
        &lab,
        with(json!({"tools": {"bash": false, "webfetch": false}})),
        text,
    );
    assert_eq!(
        tools_offered(&out),
        [
            "edit",
            "glob",
            "grep",
            "read",
            "skill",
            "task",
            "todowrite",
            "write"
        ]
    );
    let out = run(
        &bin,
        &lab,
        with(json!({"permission": {"bash": "deny"}})),
        text,
    );
    assert!(!tools_offered(&out).contains(&"bash".to_string()));
    // No tools at all.
    let out = run(&bin, &lab, with(json!({"permission": {"*": "deny"}})), text);
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(tools_offered(&out), Vec::<String>::new());
}

#[test]
fn a_command_outside_the_project_is_rejected_in_run_unless_auto() {
    let Some(bin) = gate() else { return };
    let lab = quiet_lab();
    // The lab's root is the parent of the working directory: outside the project.
    let command = format!("touch {}/ran-outside && echo done", lab.root().display());
    // `external_directory` is "ask" by default and `opencode run` rejects every ask: the call
    // fails, the turn ends without telling the model, and the run still exits 0.
    let out = run(
        &bin,
        &lab,
        Setup::default(),
        bash_then_text(command.clone()),
    );
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(!lab.ran("outside"));
    let tool = &out.events_of("tool_use")[0]["part"]["state"];
    assert_eq!(tool["status"], "error");
    assert_eq!(
        tool["error"],
        "The user rejected permission to use this specific tool call."
    );
    assert_eq!(
        out.agent_requests().len(),
        1,
        "the model is not asked again"
    );
    // --auto approves what is not denied.
    let auto = Setup {
        args: vec!["--auto"],
        ..Setup::default()
    };
    let out = run(&bin, &lab, auto, bash_then_text(command.clone()));
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(lab.ran("outside"));
    assert_eq!(
        out.events_of("tool_use")[0]["part"]["state"]["status"],
        "completed"
    );
    assert_offline(&out);
    // `deny` instead of `ask`: the model hears the refusal and the turn goes on.
    fs::remove_file(lab.root().join("ran-outside")).unwrap();
    let deny = Setup {
        config: json!({"permission": {"external_directory": "deny"}}),
        ..Setup::default()
    };
    let out = run(&bin, &lab, deny, bash_then_text(command));
    assert!(!lab.ran("outside"));
    let agent = out.agent_requests();
    assert_eq!(agent.len(), 2);
    let refusal = last_tool_result(agent[1]).unwrap();
    assert!(
        refusal.starts_with("The user has specified a rule which prevents you"),
        "{refusal}"
    );
    // The check reads the command's text: a path it cannot see is not asked about.
    let hidden = format!(
        "sh -c \"touch $(printf %s {}/ran-outside)\" && echo done",
        lab.root().display()
    );
    let out = run(&bin, &lab, Setup::default(), bash_then_text(hidden));
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(
        lab.ran("outside"),
        "OpenCode's permission check is no confinement"
    );
}

#[test]
fn grep_and_glob_run_rg_from_path_or_fetch_it_from_github() {
    let Some(bin) = gate() else { return };
    let rg = Command::new("/usr/bin/rg").arg("--version").output();
    if !prerequisite(
        rg.is_ok_and(|o| o.status.success()),
        "needs /usr/bin/rg (Debian package ripgrep; .ci/run installs it)",
    ) {
        return;
    }
    let lab = quiet_lab();
    lab.put("proj/src/a.txt", "needle here\n");
    for tool in ["grep", "glob"] {
        let arguments = match tool {
            "grep" => json!({"pattern": "needle"}),
            _ => json!({"pattern": "**/*.txt"}),
        };
        let out = run(
            &bin,
            &lab,
            Setup::default(),
            tool_then_text(tool, arguments.clone()),
        );
        assert_offline(&out);
        let state = &out.events_of("tool_use")[0]["part"]["state"];
        assert_eq!(state["status"], "completed", "{tool}: {state}");
        assert!(
            state["output"].as_str().unwrap().contains("src/a.txt"),
            "{state}"
        );
        // Without rg on PATH (nor in ~/.cache/opencode/bin) the release downloads ripgrep 15.1.0
        // from GitHub.
        let bare = lab.root().join(format!("bin-{tool}"));
        fs::create_dir_all(&bare).unwrap();
        std::os::unix::fs::symlink("/bin/sh", bare.join("sh")).unwrap();
        let no_rg = Setup {
            path: Some(bare.display().to_string()),
            ..Setup::default()
        };
        let mut out = run(&bin, &lab, no_rg, tool_then_text(tool, arguments));
        out.outbound.dedup();
        assert_eq!(out.outbound, ["github.com:443"], "{tool}");
        let state = &out.events_of("tool_use")[0]["part"]["state"];
        assert_eq!(state["error"], "ripgrep execution failed", "{tool}");
    }
}

#[test]
fn tools_inherit_the_environment_with_the_config_content_and_its_key() {
    let Some(bin) = gate() else { return };
    let lab = quiet_lab();
    let out = run(
        &bin,
        &lab,
        Setup::default(),
        bash_then_text("printenv OPENCODE_CONFIG_CONTENT HOME".into()),
    );
    let state = &out.events_of("tool_use")[0]["part"]["state"];
    let output = state["output"].as_str().unwrap();
    assert!(output.contains("placeholder-key"), "{output}");
    assert!(
        output.contains(&lab.home().display().to_string()),
        "{output}"
    );
    assert_offline(&out);
}

/// A custom tool module (`{tool,tools}/*.{js,ts}` of a config dir) that writes `ran-<name>`
/// when OpenCode imports it and offers a tool described by `MARK_<name>`.
fn custom_tool(lab: &Lab, path: &str, name: &str) {
    let marker = lab.root().join(format!("ran-{name}"));
    lab.put(
        path,
        &format!(
            "require(\"fs\").writeFileSync({:?}, \"1\")\n\
             export default {{ description: \"MARK_{name}\", args: {{}}, async execute() {{ return \"ok\" }} }}\n",
            marker.display().to_string()
        ),
    );
}

#[test]
fn custom_tool_modules_execute_even_when_pure() {
    let Some(bin) = gate() else { return };
    let lab = quiet_lab();
    lab.seed("proj/.opencode");
    custom_tool(&lab, "proj/.opencode/tools/proj_tool.ts", "proj_tool");
    custom_tool(
        &lab,
        "home/.config/opencode/tool/config_tool.js",
        "config_tool",
    );
    let pure = Setup {
        args: vec!["--pure"],
        ..Setup::default()
    };
    let out = run(&bin, &lab, pure, text);
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_offline(&out);
    assert!(lab.ran("proj_tool") && lab.ran("config_tool"));
    let offered = tools_offered(&out);
    assert!(
        offered.contains(&"proj_tool".to_string()) && offered.contains(&"config_tool".to_string()),
        "{offered:?}"
    );
    assert!(out.told("MARK_proj_tool") && out.told("MARK_config_tool"));
    // Project config off: the config dir's tool still loads.
    for name in ["proj_tool", "config_tool"] {
        fs::remove_file(lab.root().join(format!("ran-{name}"))).unwrap();
    }
    let no_project = Setup {
        env: vec![("OPENCODE_DISABLE_PROJECT_CONFIG", "1".into())],
        ..Setup::default()
    };
    let out = run(&bin, &lab, no_project, text);
    assert!(!lab.ran("proj_tool") && lab.ran("config_tool"));
    assert!(!out.told("MARK_proj_tool"));
}

#[test]
fn git_commands_the_project_repository_plants_never_run() {
    let Some(bin) = gate() else { return };
    let lab = quiet_lab();
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .args(args)
            .current_dir(lab.proj())
            .env("HOME", lab.home())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "git {args:?}");
    };
    if !prerequisite(
        Command::new("git").arg("--version").output().is_ok(),
        "needs git",
    ) {
        return;
    }
    git(&["init", "-q"]);
    lab.put("proj/f.txt", "one\n");
    git(&["add", "f.txt"]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-qm",
        "init",
    ]);
    let root = lab.root().display().to_string();
    let script = format!("{root}/planted.sh");
    lab.put(
        "planted.sh",
        &format!("#!/bin/sh\ntouch {root}/ran-git-$(basename \"$0\")-\"$1\"\n"),
    );
    fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    for (key, value) in [
        ("core.fsmonitor", script.as_str()),
        ("diff.external", script.as_str()),
        ("core.pager", script.as_str()),
        ("core.hooksPath", &format!("{root}/hooks")),
    ] {
        git(&["config", key, value]);
    }
    for hook in [
        "post-checkout",
        "pre-commit",
        "post-commit",
        "post-index-change",
    ] {
        fs::create_dir_all(lab.root().join("hooks")).unwrap();
        std::os::unix::fs::symlink(&script, lab.root().join("hooks").join(hook)).unwrap();
    }
    // A tool call that changes a tracked file: OpenCode snapshots the work tree around it.
    let out = run(
        &bin,
        &lab,
        Setup::default(),
        bash_then_text("echo two >> f.txt && echo changed".into()),
    );
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(
        out.events_of("tool_use")[0]["part"]["state"]["status"],
        "completed"
    );
    let ran = || -> Vec<String> {
        fs::read_dir(lab.root())
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("ran-git"))
            .collect()
    };
    assert_eq!(ran(), Vec::<String>::new());
    // The control: git itself, in the project, runs what was planted.
    git(&["status", "--short"]);
    assert!(
        !ran().is_empty(),
        "the planted fsmonitor runs under git status"
    );
    // OpenCode's own snapshot repository lives in its data dir, not in the project.
    assert!(lab.home().join(".local/share/opencode/snapshot").is_dir());
}
