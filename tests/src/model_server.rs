//! A scripted model server on 127.0.0.1 for offline runs of the real agents, speaking two APIs
//! as server-sent events:
//!
//! - OpenAI chat completions (`POST /v1/chat/completions`), which pi speaks through a
//!   `models.json` provider with `api: openai-completions`;
//! - Anthropic Messages (`POST /v1/messages`, Claude Code with `ANTHROPIC_BASE_URL`), streamed,
//!   or one JSON message when the request does not ask for a stream;
//! - OpenAI Responses (`POST /v1/responses`), which Codex speaks through a model provider with
//!   `wire_api = "responses"`: `response.created`, one `response.output_item.done` (a `message`
//!   or a `function_call`) and `response.completed` with the usage.
//!
//! The script is a function from the request's JSON body to a [`Reply`]. Every request body is
//! kept, in arrival order, so a test can assert what the agent sent (tools offered, tool results),
//! and so are the credential headers (`x-api-key`, `authorization`) and `Host` of each request.
//! A server told to [`ModelServer::require_key`] answers 401 to a request that carries no header
//! with that key.
//! The server stops when the [`ModelServer`] is dropped.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use serde_json::{json, Value};

/// What the model answers to one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// One call of the tool `name` with these JSON arguments (`finish_reason: tool_calls`).
    ToolCall {
        /// The tool's name, as offered in the request's `tools`.
        name: String,
        /// Its arguments.
        arguments: Value,
    },
    /// Assistant text (`finish_reason: stop`).
    Text(String),
    /// An HTTP error with the API's JSON error body (a 4xx is not retried by the agents).
    Error {
        /// The HTTP status code.
        status: u16,
        /// The error message.
        message: String,
    },
}

type Script = dyn Fn(&Value) -> Reply + Send + Sync;

/// What the connections share beside the bodies: the key required, the headers seen.
#[derive(Default)]
struct Shared {
    required_key: Mutex<Option<String>>,
    /// Per request: `(lowercase name, value)` of `x-api-key`, `authorization` and `host`.
    headers: Mutex<Vec<Vec<(String, String)>>>,
}

/// The usage every answer reports: prompt tokens (cache reads included), of them read from the
/// prompt cache, and output tokens (every API); tokens written to the cache (Anthropic only:
/// `cache_creation_input_tokens`, besides the prompt tokens).
pub const PROMPT_TOKENS: u64 = 10;
/// See [`PROMPT_TOKENS`].
pub const CACHE_READ_TOKENS: u64 = 3;
/// See [`PROMPT_TOKENS`].
pub const CACHE_WRITE_TOKENS: u64 = 2;
/// See [`PROMPT_TOKENS`].
pub const OUTPUT_TOKENS: u64 = 5;

/// A running scripted server; stopped on drop.
pub struct ModelServer {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Value>>>,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ModelServer {
    /// Starts a server on an ephemeral port of 127.0.0.1 answering with `script`.
    pub fn start(script: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> ModelServer {
        Self::start_on(0, script).expect("bind 127.0.0.1:0")
    }

    /// [`ModelServer::start`] on 127.0.0.1:`port` (0: any free port).
    pub fn start_on(
        port: u16,
        script: impl Fn(&Value) -> Reply + Send + Sync + 'static,
    ) -> std::io::Result<ModelServer> {
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        let addr = listener.local_addr().expect("local_addr");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let shared = Arc::new(Shared::default());
        let stop = Arc::new(AtomicBool::new(false));
        let script: Arc<Script> = Arc::new(script);
        let thread = {
            let (requests, stop) = (Arc::clone(&requests), Arc::clone(&stop));
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    let (requests, script) = (Arc::clone(&requests), Arc::clone(&script));
                    let shared = Arc::clone(&shared);
                    std::thread::spawn(move || serve(stream, &requests, &shared, &*script));
                }
            })
        };
        Ok(ModelServer {
            addr,
            requests,
            shared,
            stop,
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:<port>/v1`, a pi provider's `baseUrl`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// `http://127.0.0.1:<port>`, Claude Code's `ANTHROPIC_BASE_URL`.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The texts of the tool results the agent has sent back so far, in order.
    pub fn tool_results(&self) -> Vec<String> {
        self.requests()
            .iter()
            .filter_map(last_tool_result)
            .collect()
    }

    /// From now on a request must carry `key` as its `x-api-key` or as `authorization:
    /// Bearer <key>`; one that does not is answered 401 (`authentication_error`).
    pub fn require_key(&self, key: &str) {
        *self
            .shared
            .required_key
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(key.to_string());
    }

    /// The `x-api-key`, `authorization` and `host` headers of each request so far, names in
    /// lower case.
    pub fn headers(&self) -> Vec<Vec<(String, String)>> {
        self.shared
            .headers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The JSON bodies of the model requests received so far (both APIs).
    pub fn requests(&self) -> Vec<Value> {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees `stop`.
        let _ = TcpStream::connect(self.addr);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The request line, the headers that matter and the body of one HTTP/1.1 request.
struct Request {
    method: String,
    path: String,
    /// `x-api-key`, `authorization` and `host`, lowercase names.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

fn read_request(reader: &mut impl BufRead) -> std::io::Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let (mut length, mut chunked) = (0usize, false);
    let mut kept = Vec::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim_end().is_empty() {
            break;
        }
        let Some((name, value)) = header.split_once(':') else {
            continue;
        };
        let value = value.trim();
        let lower = name.trim().to_ascii_lowercase();
        if matches!(lower.as_str(), "x-api-key" | "authorization" | "host") {
            kept.push((lower.clone(), value.to_string()));
        }
        match lower.as_str() {
            "content-length" => {
                length = value.parse().map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, "bad content-length")
                })?;
            }
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size)?;
            let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, "bad chunk size")
                })?;
            if size == 0 {
                // Trailers, if any, up to the empty line.
                let mut trailer = String::new();
                while reader.read_line(&mut trailer)? > 0 && !trailer.trim_end().is_empty() {
                    trailer.clear();
                }
                break;
            }
            let mut chunk = vec![0u8; size + 2]; // data and its CRLF
            reader.read_exact(&mut chunk)?;
            body.extend_from_slice(&chunk[..size]);
        }
    } else {
        body.resize(length, 0);
        reader.read_exact(&mut body)?;
    }
    Ok(Some(Request {
        method,
        path,
        headers: kept,
        body,
    }))
}

/// Answers requests on one connection until the client closes it.
fn serve(stream: TcpStream, requests: &Mutex<Vec<Value>>, shared: &Shared, script: &Script) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    while let Ok(Some(request)) = read_request(&mut reader) {
        // Claude Code appends `?beta=true`.
        let path = request.path.split('?').next().unwrap_or_default();
        let api = match (request.method.as_str(), path) {
            ("POST", "/v1/chat/completions") => Some(Api::OpenAi),
            ("POST", "/v1/messages") => Some(Api::Anthropic),
            ("POST", "/v1/responses") => Some(Api::Responses),
            _ => None,
        };
        shared
            .headers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request.headers.clone());
        let required = shared
            .required_key
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let authorised = required.as_deref().is_none_or(|key| {
            request.headers.iter().any(|(n, v)| {
                (n == "x-api-key" && v == key)
                    || (n == "authorization" && v.strip_prefix("Bearer ") == Some(key))
            })
        });
        let response = match (api, serde_json::from_slice::<Value>(&request.body)) {
            (Some(api), _) if !authorised => error_response(401, "invalid x-api-key", api),
            (None, _) if request.method == "HEAD" => http_response("200 OK", "text/plain", ""),
            (None, _) => http_response("404 Not Found", "text/plain", "not found\n"),
            (Some(_), Err(e)) => http_response("400 Bad Request", "text/plain", &format!("{e}\n")),
            (Some(api), Ok(body)) => {
                requests
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(body.clone());
                // A script that panics answers 400 (not retried by the agents) so that the
                // test fails on what it asserts instead of waiting for the agent's timeout.
                let reply =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| script(&body)))
                        .unwrap_or_else(|_| Reply::Error {
                            status: 400,
                            message: "the model server's script panicked".into(),
                        });
                match (&reply, api) {
                    (Reply::Error { status, message }, api) => {
                        error_response(*status, message, api)
                    }
                    (_, Api::OpenAi) => http_response(
                        "200 OK",
                        "text/event-stream",
                        &chat_completion_events(&reply),
                    ),
                    (_, Api::Responses) => {
                        http_response("200 OK", "text/event-stream", &response_events(&reply))
                    }
                    (_, Api::Anthropic) if body["stream"] == true => {
                        http_response("200 OK", "text/event-stream", &message_events(&reply))
                    }
                    (_, Api::Anthropic) => http_response(
                        "200 OK",
                        "application/json",
                        &anthropic_message(&reply, &tool_use_id()).to_string(),
                    ),
                }
            }
        };
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// An HTTP error response in the shape of `api`'s error bodies.
fn error_response(status: u16, message: &str, api: Api) -> String {
    let body = match api {
        Api::OpenAi | Api::Responses => {
            json!({"error": {"message": message, "type": "invalid_request_error"}})
        }
        Api::Anthropic => json!({
            "type": "error",
            "error": {"type": "invalid_request_error", "message": message},
        }),
    };
    http_response(
        &format!("{status} Scripted Error"),
        "application/json",
        &body.to_string(),
    )
}

/// Which API a request speaks.
#[derive(Clone, Copy)]
enum Api {
    OpenAi,
    Anthropic,
    Responses,
}

fn http_response(status: &str, content_type: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncache-control: no-cache\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// The server-sent events of a streamed chat completion carrying `reply`.
fn chat_completion_events(reply: &Reply) -> String {
    let chunk = |choices: Value| {
        json!({
            "id": "chatcmpl-pitcrew",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "mock-model",
            "choices": choices,
        })
    };
    let choice = |delta: Value, finish: Value| json!([{"index": 0, "delta": delta, "finish_reason": finish}]);
    let mut chunks = Vec::new();
    match reply {
        Reply::ToolCall { name, arguments } => {
            chunks.push(chunk(choice(
                json!({"role": "assistant", "tool_calls": [{
                    "index": 0, "id": "call_pitcrew_1", "type": "function",
                    "function": {"name": name, "arguments": ""},
                }]}),
                Value::Null,
            )));
            chunks.push(chunk(choice(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": arguments.to_string()}}]}),
                Value::Null,
            )));
            chunks.push(chunk(choice(json!({}), json!("tool_calls"))));
        }
        Reply::Text(text) => {
            chunks.push(chunk(choice(
                json!({"role": "assistant", "content": text}),
                Value::Null,
            )));
            chunks.push(chunk(choice(json!({}), json!("stop"))));
        }
        // Answered by `error_response` before any event is built.
        Reply::Error { .. } => {}
    }
    let mut usage = chunk(json!([]));
    usage["usage"] = json!({
        "prompt_tokens": PROMPT_TOKENS, "completion_tokens": OUTPUT_TOKENS,
        "total_tokens": PROMPT_TOKENS + OUTPUT_TOKENS,
        "prompt_tokens_details": {"cached_tokens": CACHE_READ_TOKENS},
    });
    chunks.push(usage);
    let mut events: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    events.push_str("data: [DONE]\n\n");
    events
}

/// The server-sent events of a streamed OpenAI Responses answer carrying `reply`: the output
/// item (a `message` with `output_text`, or a `function_call` whose `arguments` is the JSON
/// text) then `response.completed` with the usage.
fn response_events(reply: &Reply) -> String {
    let id = tool_use_id();
    let item = match reply {
        Reply::ToolCall { name, arguments } => {
            // `namespace::name` calls a tool of a namespace (Codex's `multi_agent_v1`).
            let mut item = json!({
                "type": "function_call", "id": format!("fc_{id}"), "call_id": format!("call_{id}"),
                "name": name, "arguments": arguments.to_string(), "status": "completed",
            });
            if let Some((namespace, tool)) = name.split_once("::") {
                item["namespace"] = json!(namespace);
                item["name"] = json!(tool);
            }
            item
        }
        Reply::Text(text) | Reply::Error { message: text, .. } => json!({
            "type": "message", "id": format!("msg_{id}"), "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }),
    };
    let response = |status: &str| {
        json!({"id": format!("resp_{id}"), "object": "response", "status": status,
               "model": "mock-model", "output": []})
    };
    let mut completed = response("completed");
    completed["output"] = json!([item.clone()]);
    completed["usage"] = json!({
        "input_tokens": PROMPT_TOKENS,
        "input_tokens_details": {"cached_tokens": CACHE_READ_TOKENS},
        "output_tokens": OUTPUT_TOKENS,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": PROMPT_TOKENS + OUTPUT_TOKENS,
    });
    let events = [
        (
            "response.created",
            json!({"type": "response.created", "response": response("in_progress")}),
        ),
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        ),
        (
            "response.completed",
            json!({"type": "response.completed", "response": completed}),
        ),
    ];
    events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect()
}

/// A tool-use id of its own for each tool call answered: Claude Code keeps one call of an id in
/// its history, so a second call under the same id would lose its result.
fn tool_use_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    format!("toolu_pitcrew_{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// An Anthropic Messages API message (the non-streamed answer) carrying `reply`, its tool call
/// (if any) under the id `id`.
fn anthropic_message(reply: &Reply, id: &str) -> Value {
    let (content, stop) = match reply {
        Reply::ToolCall { name, arguments } => (
            json!([{"type": "tool_use", "id": id, "name": name, "input": arguments}]),
            "tool_use",
        ),
        Reply::Text(text) => (json!([{"type": "text", "text": text}]), "end_turn"),
        Reply::Error { message, .. } => (json!([{"type": "text", "text": message}]), "end_turn"),
    };
    json!({
        "id": "msg_pitcrew", "type": "message", "role": "assistant", "model": "mock-model",
        "content": content, "stop_reason": stop, "stop_sequence": null,
        "usage": {
            "input_tokens": PROMPT_TOKENS - CACHE_READ_TOKENS, "output_tokens": OUTPUT_TOKENS,
            "cache_read_input_tokens": CACHE_READ_TOKENS,
            "cache_creation_input_tokens": CACHE_WRITE_TOKENS,
        },
    })
}

/// The server-sent events of a streamed Anthropic message carrying `reply`.
fn message_events(reply: &Reply) -> String {
    let id = tool_use_id();
    let message = anthropic_message(reply, &id);
    let mut start = message.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    let (block, delta) = match reply {
        Reply::ToolCall { name, arguments } => (
            json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
            json!({"type": "input_json_delta", "partial_json": arguments.to_string()}),
        ),
        Reply::Text(text) | Reply::Error { message: text, .. } => (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": text}),
        ),
    };
    let events = [
        (
            "message_start",
            json!({"type": "message_start", "message": start}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": block}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta",
                   "delta": {"stop_reason": message["stop_reason"], "stop_sequence": null},
                   "usage": {"output_tokens": OUTPUT_TOKENS}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect()
}

/// A script for an agent that runs one shell command per iteration: the first turn of each
/// iteration calls the tool `tool` with `arguments(command)`, `commands` in order (the last one
/// repeats); a turn that carries a tool result is answered with text quoting it.
pub fn one_command_per_iteration(
    tool: &'static str,
    commands: &'static [&'static str],
    arguments: fn(&str) -> Value,
) -> impl Fn(&Value) -> Reply + Send + Sync + 'static {
    let iteration = std::sync::atomic::AtomicUsize::new(0);
    move |request| {
        if let Some(result) = last_tool_result(request) {
            return Reply::Text(format!("the tool said: {result}"));
        }
        let n = iteration.fetch_add(1, Ordering::SeqCst);
        let command = commands[n.min(commands.len().saturating_sub(1))];
        Reply::ToolCall {
            name: tool.into(),
            arguments: arguments(command),
        }
    }
}

/// The text of the last tool result in a model request, if any: the last `role: tool` message
/// (OpenAI chat), the last `tool_result` block of a user message (Anthropic), or the last
/// `function_call_output` input item (OpenAI Responses).
pub fn last_tool_result(request: &Value) -> Option<String> {
    if let Some(input) = request["input"].as_array() {
        return input
            .iter()
            .rev()
            .find(|item| item["type"] == "function_call_output")
            .and_then(|item| match &item["output"] {
                Value::String(text) => Some(text.clone()),
                Value::Array(parts) => Some(
                    parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join(""),
                ),
                _ => None,
            });
    }
    let messages = request["messages"].as_array()?;
    let text = |content: &Value| match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join(""),
        ),
        _ => None,
    };
    messages.iter().rev().find_map(|m| {
        if m["role"] == "tool" {
            return text(&m["content"]);
        }
        let blocks = m["content"].as_array()?;
        let result = blocks.iter().rev().find(|b| b["type"] == "tool_result")?;
        text(&result["content"])
    })
}

/// The port the examples' configurations name (`examples/pi`, `examples/claude`).
pub const EXAMPLE_PORT: u16 = 8377;

/// The script of the examples: the first request of an iteration calls a tool (pi: the
/// example extension's `hello_tool`; Claude: `Bash` writing `hello.txt` in the workspace),
/// the next answers with what the tool returned.
pub fn example_script(request: &Value) -> Reply {
    if let Some(result) = last_tool_result(request) {
        return Reply::Text(format!("the tool said: {result}"));
    }
    // OpenAI Responses requests (Codex) carry `input`; Anthropic Messages requests a top-level
    // `system`; pi's and OpenCode's OpenAI chat requests neither (OpenCode offers `todowrite`,
    // and asks for a session title with a system prompt of its own).
    let offered = |name: &str| {
        request["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == name))
    };
    let title = request["messages"][0]["content"]
        .as_str()
        .is_some_and(|s| s.starts_with("You are a title generator"));
    if title {
        Reply::Text("Hello".into())
    } else if offered("todowrite") {
        Reply::ToolCall {
            name: "bash".into(),
            arguments: json!({
                "command": "echo hello from the sandbox > hello.txt && cat hello.txt",
                "description": "write hello.txt",
            }),
        }
    } else if request.get("input").is_some() {
        Reply::ToolCall {
            name: "exec_command".into(),
            arguments: json!({"cmd": "echo hello from the sandbox > hello.txt && cat hello.txt"}),
        }
    } else if request.get("system").is_some() {
        Reply::ToolCall {
            name: "Bash".into(),
            arguments: json!({
                "command": "echo hello from the sandbox > hello.txt && cat hello.txt",
                "description": "write hello.txt",
            }),
        }
    } else {
        Reply::ToolCall {
            name: "hello_tool".into(),
            arguments: json!({"name": "pitcrew"}),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_request_body_is_read_whole() {
        let raw = b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4\r\n\":1}\r\n0\r\nX-Trailer: 1\r\n\r\nGET / HTTP/1.1\r\n\r\n";
        let mut reader = &raw[..];
        let request = read_request(&mut reader).unwrap().unwrap();
        assert_eq!(request.body, b"{\"a\":1}");
        // The trailer is consumed: the next request starts where it should.
        let next = read_request(&mut reader).unwrap().unwrap();
        assert_eq!((next.method.as_str(), next.path.as_str()), ("GET", "/"));
    }

    #[test]
    fn tool_results_are_found_in_both_apis() {
        let openai = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "tool", "content": [{"type": "text", "text": "r1"}]},
        ]});
        assert_eq!(last_tool_result(&openai).as_deref(), Some("r1"));
        let anthropic = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r2"}]},
        ]});
        assert_eq!(last_tool_result(&anthropic).as_deref(), Some("r2"));
        assert_eq!(
            last_tool_result(&json!({"messages": [{"role": "user", "content": "hi"}]})),
            None
        );
        let responses = json!({"input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "r3"},
        ]});
        assert_eq!(last_tool_result(&responses).as_deref(), Some("r3"));
        let parts = json!({"input": [{"type": "function_call_output", "call_id": "c",
            "output": [{"type": "input_text", "text": "r"}, {"type": "input_text", "text": "4"}]}]});
        assert_eq!(last_tool_result(&parts).as_deref(), Some("r4"));
        assert_eq!(last_tool_result(&json!({"input": []})), None);
    }

    #[test]
    fn responses_events_carry_the_item_and_complete() {
        let events = response_events(&Reply::ToolCall {
            name: "exec_command".into(),
            arguments: json!({"cmd": "id -u"}),
        });
        let data: Vec<Value> = events
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        let types: Vec<_> = data.iter().map(|d| d["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "response.created",
                "response.output_item.done",
                "response.completed"
            ]
        );
        let item = &data[1]["item"];
        assert_eq!(item["type"], "function_call");
        assert_eq!(item["name"], "exec_command");
        assert_eq!(item["arguments"], r#"{"cmd":"id -u"}"#);
        assert!(data[2]["response"]["id"]
            .as_str()
            .unwrap()
            .starts_with("resp_"));
        assert_eq!(data[2]["response"]["usage"]["output_tokens"], OUTPUT_TOKENS);
        let text = response_events(&Reply::Text("hello".into()));
        assert!(text.contains(r#""type":"output_text""#) && text.contains(r#""text":"hello""#));
        assert!(text.starts_with("event: response.created\ndata: "));
    }

    #[test]
    fn anthropic_events_name_each_event() {
        let events = message_events(&Reply::Text("hello".into()));
        assert!(events.starts_with("event: message_start\ndata: "));
        assert!(events.contains(r#""stop_reason":"end_turn""#));
        assert!(events.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
    }

    #[test]
    fn tool_call_events_end_with_done() {
        let events = chat_completion_events(&Reply::ToolCall {
            name: "t".into(),
            arguments: json!({"x": 1}),
        });
        assert!(events.contains("\"finish_reason\":\"tool_calls\""));
        assert!(events.contains(r#""arguments":"{\"x\":1}""#));
        assert!(events.ends_with("data: [DONE]\n\n"));
    }
}
