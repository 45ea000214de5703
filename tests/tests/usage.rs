//! Token usage and cost in the record, from the real pi (`tests/tests/claude.rs` checks Claude
//! Code's): pi `--mode json` reports each model call's usage and its cost from the price list of
//! `models.json`, and the record's `usage` and the run's document carry the sum.
//!
//! Needs root, PID namespaces and pi 0.73.1 on `PATH` (`scripts/install-agents`); skipped
//! otherwise, or a failure with `PITCREW_REQUIRE_E2E=1`.

use pitcrew_e2e::model_server::{
    ModelServer, Reply, CACHE_READ_TOKENS, OUTPUT_TOKENS, PROMPT_TOKENS,
};
use pitcrew_e2e::{
    agent_version, iteration_dir, pitcrew_run, prerequisite, read_json, require_pid_namespaces,
};
use serde_json::json;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;

/// The pi release on `PATH` the tests run.
const PI_VERSION: &str = "0.73.1";

/// Dollars per million tokens in the `models.json` price list.
const PRICE: [(&str, f64); 4] = [
    ("input", 3.0),
    ("output", 15.0),
    ("cacheRead", 0.3),
    ("cacheWrite", 3.75),
];

#[test]
fn pis_tokens_and_cost_reach_the_record_and_the_run_document() {
    let version = agent_version("pi");
    if !(require_pid_namespaces()
        && prerequisite(
            version.as_deref() == Some(PI_VERSION),
            &format!("needs pi {PI_VERSION} on PATH (scripts/install-agents), found {version:?}"),
        ))
    {
        return;
    }
    let server = ModelServer::start(|_| Reply::Text("nothing to do".into()));
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::set_permissions(root, fs::Permissions::from_mode(0o755)).unwrap();
    fs::create_dir_all(root.join("config")).unwrap();
    fs::create_dir_all(root.join("workspace")).unwrap();
    let cost: serde_json::Map<_, _> = PRICE.iter().map(|(k, v)| ((*k).into(), json!(v))).collect();
    let models = json!({"providers": {"mock": {
        "baseUrl": server.base_url(), "api": "openai-completions", "apiKey": "dummy-key",
        "models": [{"id": "mock-model", "name": "Mock", "reasoning": false, "input": ["text"],
                    "contextWindow": 32000, "maxTokens": 1024, "cost": cost}],
    }}});
    fs::write(root.join("config/models.json"), models.to_string()).unwrap();
    let harness = root.join("harness.yaml");
    fs::write(
        &harness,
        "runtime: pi\nprompt: \"say something\"\nagent:\n  model: mock/mock-model\n\
         adapters:\n  - path: config/models.json\n    role: config\n\
         iterations: 1\ntimeout: 120s\nworkdir: workspace\n",
    )
    .unwrap();
    let state = root.join("state");
    fs::create_dir(&state).unwrap();
    let doc = pitcrew_run(&harness, &state, &[], &[]);
    let record = read_json(&iteration_dir(&doc, 1).join("result.json"));
    let usage = &record["usage"];
    assert_eq!(usage["source"], "pi-json", "{record:#}");
    // One model call: pi counts the cached prompt tokens apart from the others.
    let input = PROMPT_TOKENS - CACHE_READ_TOKENS;
    assert_eq!(usage["input_tokens"], input, "{usage:#}");
    assert_eq!(usage["output_tokens"], OUTPUT_TOKENS, "{usage:#}");
    assert_eq!(usage["cache_read_tokens"], CACHE_READ_TOKENS, "{usage:#}");
    assert_eq!(usage["cache_write_tokens"], 0, "{usage:#}");
    let expected = (input as f64 * PRICE[0].1
        + OUTPUT_TOKENS as f64 * PRICE[1].1
        + CACHE_READ_TOKENS as f64 * PRICE[2].1)
        / 1e6;
    let cost = usage["cost_usd"].as_f64().unwrap_or(-1.0);
    assert!((cost - expected).abs() < 1e-12, "{cost} != {expected}");
    assert_eq!(&doc["iterations"][0]["usage"], usage, "{doc:#}");
}
