//! One harness for four runtimes. The same `plugins:` list holds one plugin of each family:
//! a pi extension, a Claude Code plugin, a Codex plugin bundle and an OpenCode plugin module.
//! Each plugin offers its runtime's model something that carries a mark of its own: a tool, a
//! skill or an MCP server's tool. The harness runs under pi, Claude Code, Codex and OpenCode in
//! turn, the `runtime:` line and the model's endpoint being all that changes. Each runtime loads
//! its own family's plugin: that mark, and no other plugin's, reaches its model, and `validate`
//! names the other three as skipped (they are uploaded and verified all the same).

use pitcrew_e2e::model_server::{ModelServer, Reply};
use pitcrew_e2e::{
    agent_version, iteration_dir, pitcrew_output, pitcrew_run_status, prerequisite, read_json,
    require_pid_namespaces,
};
use serde_json::Value;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

/// Each family: its plugin's directory, the kind `validate` names it by, and the mark it
/// puts before the model.
const FAMILIES: [(&str, &str, &str); 4] = [
    ("family-pi", "pi", "FAMILY_PI_MARK"),
    ("family-claude", "claude", "FAMILY_CLAUDE_MARK"),
    ("family-codex", "codex", "FAMILY_CODEX_MARK"),
    ("family-opencode", "opencode", "FAMILY_OPENCODE_MARK"),
];

/// The plugins' common list, the same for every runtime.
const PLUGINS: &str = "plugins:
  - plugins/family-pi
  - plugins/family-claude
  - plugins/family-codex
  - plugins/family-opencode
";

/// A pi extension registering a tool whose description is pi's mark.
const PI_EXTENSION: &str = r#"import { Type } from "@sinclair/typebox";

export default function (pi: any) {
	pi.registerTool({
		name: "family_pi",
		label: "Family",
		description: "FAMILY_PI_MARK",
		parameters: Type.Object({}),
		async execute() {
			return { content: [{ type: "text", text: "pi" }], details: {} };
		},
	});
}
"#;

/// An MCP server (stdio, one JSON message a line) offering one tool described by Codex's mark.
const MCP_SERVER: &str = r#"import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg.get("method") == "initialize":
        res = {"protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
               "capabilities": {"tools": {}}, "serverInfo": {"name": "family", "version": "1"}}
    elif msg.get("method") == "tools/list":
        res = {"tools": [{"name": "family_codex", "description": "FAMILY_CODEX_MARK",
                          "inputSchema": {"type": "object", "properties": {}}}]}
    else:
        res = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": res}) + "\n")
    sys.stdout.flush()
"#;

/// An OpenCode plugin module offering a tool described by OpenCode's mark.
const OPENCODE_PLUGIN: &str = r#"export const Family = async () => ({
  tool: {
    family_opencode: {
      description: "FAMILY_OPENCODE_MARK",
      args: {},
      async execute() { return "opencode"; },
    },
  },
});
"#;

/// Writes the four plugins under `root/plugins`.
fn write_plugins(root: &Path) {
    let write = |path: &str, text: &str| {
        let path = root.join("plugins").join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    };
    write("family-pi/index.ts", PI_EXTENSION);
    write(
        "family-claude/.claude-plugin/plugin.json",
        r#"{"name": "family-claude", "version": "1.0.0", "description": "one family's plugin"}"#,
    );
    write(
        "family-claude/skills/family-claude/SKILL.md",
        "---\nname: family-claude\ndescription: FAMILY_CLAUDE_MARK\n---\nA skill.\n",
    );
    write(
        "family-codex/.codex-plugin/plugin.json",
        r#"{"name": "family-codex", "version": "1.0.0", "description": "one family's plugin"}"#,
    );
    write(
        "family-codex/.mcp.json",
        r#"{"mcpServers": {"family": {"command": "python3", "args": ["server.py"], "cwd": "."}}}"#,
    );
    write("family-codex/server.py", MCP_SERVER);
    write("family-opencode/plugins/family.ts", OPENCODE_PLUGIN);
}

/// pi's pinned `models.json`, sending the model to `server`.
fn pi_models(server: &ModelServer) -> String {
    serde_json::json!({"providers": {"scripted": {
        "baseUrl": server.base_url(),
        "api": "openai-completions",
        "apiKey": "offline",
        "models": [{"id": "scripted-model", "name": "Scripted", "reasoning": false,
            "input": ["text"], "contextWindow": 32000, "maxTokens": 1024,
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}}],
    }}})
    .to_string()
}

/// The runtime-specific head of the harness for `runtime` against `server` (everything but
/// the plugins), and the variable the model key goes by.
fn head(runtime: &str, server: &ModelServer) -> (String, Option<&'static str>) {
    let common = "prompt: \"say hello\"\niterations: 1\ntimeout: 180s\nworkdir: workspace\n";
    match runtime {
        "pi" => (
            format!(
                "runtime: pi\nagent:\n  model: scripted/scripted-model\nadapters:\n  - path: config/models.json\n    role: config\n{common}"
            ),
            None,
        ),
        "claude" => (
            format!(
                "runtime: claude\nagent:\n  model: claude-sonnet-4-5\nenv:\n  ANTHROPIC_BASE_URL: \"{}\"\n{common}",
                server.origin()
            ),
            Some("ANTHROPIC_API_KEY"),
        ),
        _ => (
            format!(
                "runtime: {runtime}\nagent:\n  model: mock-model\nenv:\n  OPENAI_BASE_URL: \"{}\"\n{common}",
                server.base_url()
            ),
            Some("OPENAI_API_KEY"),
        ),
    }
}

/// Whether `runtime`'s binary is the release its tests pin, said when not.
fn has(runtime: &str) -> bool {
    let (binary, version) = match runtime {
        "pi" => ("pi", "0.73.1"),
        "claude" => ("claude", "2.1.332"),
        "codex" => ("codex", "0.169.1"),
        _ => ("opencode", "1.18.33"),
    };
    let found = agent_version(binary);
    prerequisite(
        found.as_deref().is_some_and(|v| v.contains(version)),
        &format!("needs {binary} {version} on PATH (scripts/install-agents), found {found:?}"),
    )
}

/// Runs the harness under `runtime`: `validate` names its own family's plugin loaded and the
/// other three skipped; the run succeeds, and its model requests carry its family's mark and
/// no other.
fn one_harness_under(runtime: &str) {
    if !require_pid_namespaces() || !has(runtime) {
        return;
    }
    let server = ModelServer::start(|_| Reply::Text("hello".into()));
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::set_permissions(root, fs::Permissions::from_mode(0o755)).unwrap();
    write_plugins(root);
    fs::create_dir_all(root.join("config")).unwrap();
    fs::write(root.join("config/models.json"), pi_models(&server)).unwrap();
    fs::create_dir_all(root.join("workspace")).unwrap();
    fs::write(root.join("workspace/README.md"), "work\n").unwrap();
    let (head, key) = head(runtime, &server);
    let harness = root.join("harness.yaml");
    fs::write(&harness, format!("{head}{PLUGINS}")).unwrap();

    let (code, out, err) = pitcrew_output(
        &["validate".as_ref(), "--json".as_ref(), harness.as_os_str()],
        &[],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let validated: Value = serde_json::from_str(&out).unwrap();
    let plugins = validated["plugins"].as_array().unwrap();
    assert_eq!(plugins.len(), FAMILIES.len(), "{validated:#}");
    for (plugin, (name, kind, _)) in plugins.iter().zip(FAMILIES) {
        assert_eq!(plugin["name"], name, "{validated:#}");
        assert_eq!(plugin["class"]["kind"], kind, "{runtime}: {plugin:#}");
        assert_eq!(
            plugin["loaded"],
            kind == runtime,
            "{runtime} loads its own family only: {plugin:#}"
        );
    }
    let notes = validated["notes"].to_string();
    for (name, kind, _) in FAMILIES.iter().filter(|(_, kind, _)| *kind != runtime) {
        assert!(
            notes.contains(name),
            "{runtime}: validate does not name the {kind} plugin {name} it skips: {notes}"
        );
    }

    let state = root.join("state");
    fs::create_dir(&state).unwrap();
    let env: Vec<(&str, &str)> = key.map(|k| (k, "sk-families")).into_iter().collect();
    let pass: Vec<&str> = key.map(|k| vec!["--pass-env", k]).unwrap_or_default();
    let (code, doc) = pitcrew_run_status(&harness, &state, &pass, &env);
    assert_eq!(code, Some(0), "{runtime}: {doc:#}");
    let requests = server.requests();
    assert!(!requests.is_empty(), "{runtime}: the model was never asked");
    let seen = serde_json::to_string(&requests).unwrap();
    for (_, kind, mark) in FAMILIES {
        assert_eq!(
            seen.contains(mark),
            kind == runtime,
            "{runtime}: the {kind} plugin's {mark} {} the model",
            if kind == runtime {
                "does not reach"
            } else {
                "reaches"
            }
        );
    }
    let record = read_json(&iteration_dir(&doc, 1).join("result.json"));
    assert_eq!(record["exit_code"], 0, "{record:#}");
}

#[test]
fn one_harness_with_a_plugin_of_each_family_runs_under_pi() {
    one_harness_under("pi");
}

#[test]
fn one_harness_with_a_plugin_of_each_family_runs_under_claude() {
    one_harness_under("claude");
}

#[test]
fn one_harness_with_a_plugin_of_each_family_runs_under_codex() {
    one_harness_under("codex");
}

#[test]
fn one_harness_with_a_plugin_of_each_family_runs_under_opencode() {
    one_harness_under("opencode");
}
