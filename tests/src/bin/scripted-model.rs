//! `scripted-model [PORT]`: the scripted model server of the tests, for the offline examples
//! (`examples/pi`, `examples/claude`): OpenAI chat completions for pi, Anthropic Messages for
//! Claude Code and OpenAI Responses for the Codex CLI on 127.0.0.1:PORT (default 8377, the port the examples name). Each iteration's
//! first request gets a tool call, the next the tool's result as text. Runs until killed.

use pitcrew_e2e::model_server::{example_script, ModelServer, EXAMPLE_PORT};

/// What `scripted-model --help` prints.
const USAGE: &str = "\
Usage: scripted-model [PORT]

The scripted model server of pitcrew's tests, for the offline examples (examples/pi,
examples/claude): OpenAI chat completions for pi, Anthropic Messages for Claude Code and
OpenAI Responses for the Codex CLI (POST /v1/responses) on 127.0.0.1:PORT (default 8377, the
port the examples name). Each iteration's first request gets a
tool call, the next the tool's result as text. Runs until killed (Ctrl-C).

Options:
  -h, --help  Print this help
";

fn main() -> std::process::ExitCode {
    let arg = std::env::args().nth(1);
    if matches!(arg.as_deref(), Some("-h" | "--help")) {
        print!("{USAGE}");
        return std::process::ExitCode::SUCCESS;
    }
    let port = match arg.map(|p| p.parse::<u16>()) {
        None => EXAMPLE_PORT,
        Some(Ok(port)) => port,
        Some(Err(e)) => {
            eprintln!("scripted-model: PORT: {e} (a port number; --help says more)");
            return std::process::ExitCode::from(2);
        }
    };
    match ModelServer::start_on(port, example_script) {
        Ok(server) => {
            println!(
                "scripted model on {} (pi: {}), Ctrl-C stops it",
                server.origin(),
                server.base_url()
            );
            loop {
                std::thread::park();
            }
        }
        Err(e) => {
            eprintln!("scripted-model: 127.0.0.1:{port}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
