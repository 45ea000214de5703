//! Environment and argument policy, defined once for the host (validation) and the supervisor
//! (the environment step).
//!
//! The agent's environment is built from layers of two kinds. **Trusted**: the image's own
//! environment (the supervisor's baseline, which the local engine fills from `--pass-env`) and
//! the harness `env:` the operator wrote. **Untrusted**: the sandbox `.env` (an earlier
//! iteration or the repository writes it) and a plugin's `env:` (it comes with the plugin tree).
//! Four lists live here:
//! - [`LOADER_RULES`] ([`loader_denial`]): variables stripped from every layer, trusted ones
//!   included, because they make an interpreter, a shell or the dynamic linker load code
//!   (`NODE_OPTIONS`, every `JITI_*`, `LD_*`, `BUN_OPTIONS`, `PYTHON*`, `BASH_ENV`, …).
//! - [`TRUSTED_ONLY_RULES`] ([`untrusted_denial`]): variables only a trusted layer may set,
//!   because they route network traffic, change TLS trust or choose a program the runtime or its
//!   tools run (`HTTPS_PROXY`, `NODE_EXTRA_CA_CERTS`, `SHELL`, `GIT_SSH_COMMAND`, `PAGER`, …).
//!   A `.env` line setting one is refused by name; a plugin `env:` entry is an error.
//! - [`PLUGIN_ENV_RULES`]: what a plugin's `env:` may not set beyond those two lists
//!   ([`plugin_env_denial`]).
//! - [`SANDBOX_ENV_RULES`]: names the harness `env:` and `--pass-env` may not set
//!   ([`sandbox_env_reserved`]).
//! - [`EGRESS_ENV_RULES`]: names the harness `env:` may not set either, because pitcrew sets
//!   them or they would take a connection past it: proxies, TLS trust, git's connection
//!   programs ([`harness_env_denial`]). What the agent reaches is the harness's `network:`.
//!
//! All matching is ASCII case-insensitive: a lower-case `node_options` or `https_proxy` is
//! refused like the upper-case one, so nobody has to reason about which programs read which
//! spelling. The tables of `docs/manifest.md` are generated from these lists
//! ([`crate::environment::policy_doc`]).
//!
//! The argument policy: what a plugin's `pi.args` may give ([`pi_args_problems`]) and what
//! `agent.args` may give ([`agent_args`]), both from the runtimes' own option tables, generated
//! from each release's `--help` ([`pi_options`], [`claude_options`]).

use std::fmt;

/// How a deny rule matches a variable name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// The whole name.
    Exact(&'static str),
    /// Names starting with this.
    Prefix(&'static str),
    /// Names ending with this.
    Suffix(&'static str),
    /// Names containing this anywhere.
    Contains(&'static str),
}

impl Pattern {
    /// Whether `name` (compared ASCII case-insensitively) matches.
    pub fn matches(self, name: &str) -> bool {
        let upper = name.to_ascii_uppercase();
        match self {
            Pattern::Exact(p) => upper == p,
            Pattern::Prefix(p) => upper.starts_with(p),
            Pattern::Suffix(p) => upper.ends_with(p),
            Pattern::Contains(p) => upper.contains(p),
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Exact(p) => write!(f, "{p}"),
            Pattern::Prefix(p) => write!(f, "{p}*"),
            Pattern::Suffix(p) => write!(f, "*{p}"),
            Pattern::Contains(p) => write!(f, "*{p}*"),
        }
    }
}

/// One deny rule: a pattern and why names matching it are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DenyRule {
    /// What the rule matches.
    pub pattern: Pattern,
    /// Why matching names are refused ("Node loads code from it", …).
    pub reason: &'static str,
}

impl fmt::Display for DenyRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.pattern, self.reason)
    }
}

const fn rule(pattern: Pattern, reason: &'static str) -> DenyRule {
    DenyRule { pattern, reason }
}

use Pattern::{Contains, Exact, Prefix, Suffix};

const NODE_LOADS: &str = "Node loads or changes code from it";
const JITI: &str = "pi's module loader (jiti) reads it: cache, alias and resolution control";
const LINKER: &str = "the dynamic linker or libc loads code from it";
const SHELL: &str = "a shell executes or sources it";
const PYTHON: &str = "Python loads code from it";
const OTHER_INTERP: &str = "an interpreter loads code from it";
const OPENCODE: &str = "OpenCode loads configuration, plugins, tools, credentials or permissions from it, or it undoes a switch pitcrew pins (the supervisor sets OpenCode's variables itself)";
const RUNTIME_CODE: &str = "the agent runtime executes or loads code from it";
const INTERP_LIBS: &str =
    "an interpreter (Tcl, Lua, Ruby, Erlang, R, awk) loads its libraries or packages from it: a verified hook written in it would load the agent's";

/// Variables stripped from every agent environment by the supervisor's environment step, from
/// every layer (the image's environment included).
///
/// These are loader and interpreter controls: whoever sets them runs code inside the agent or
/// its tools, whatever the verified trees say. `BASH_ENV` and `ENV` stay here although they
/// also choose what every tool call runs: they make every shell source a file, a code loader
/// like `NODE_OPTIONS`. `JITI_FS_CACHE` is stripped too and then pinned to `false` by the runner
/// pins. pi's self-update and managed-install variables (`PI_SELF_UPDATE_COMMAND`,
/// `PI_INSTALLER_API_BASE`, `PI_MANAGED_INSTALL_ROOT`) choose what `pi update` runs, downloads
/// and installs, code no tree verified; `CLAUDE_CODE_PLUGIN_DIRS` is Claude Code's spelling of
/// `--plugin-dir` (which `agent.args` refuses) in the environment, and its other plugin, skill,
/// settings and instruction locations (`CLAUDE_CODE_PLUGIN_SEED_DIR`,
/// `CLAUDE_CODE_PLUGIN_CACHE_DIR`, `CLAUDE_CODE_MANAGED_SETTINGS_PATH`, …) would load what no
/// tree verified; `PI_TUI_WRITE_LOG`, like `NODE_REDIRECT_WARNINGS`, makes
/// the runtime write files where it says. No layer has a use for them inside a sandbox.
pub const LOADER_RULES: &[DenyRule] = &[
    rule(Exact("NODE_OPTIONS"), NODE_LOADS),
    rule(Exact("NODE_PATH"), NODE_LOADS),
    rule(Exact("NODE_REPL_EXTERNAL_MODULE"), NODE_LOADS),
    rule(Exact("NODE_PRESERVE_SYMLINKS"), NODE_LOADS),
    rule(Exact("NODE_ICU_DATA"), NODE_LOADS),
    rule(Prefix("NODE_COMPILE_CACHE"), NODE_LOADS),
    rule(Exact("NODE_UNIQUE_ID"), NODE_LOADS),
    rule(Prefix("NODE_CHANNEL_"), NODE_LOADS),
    rule(Exact("NODE_TEST_CONTEXT"), NODE_LOADS),
    rule(Exact("NODE_V8_COVERAGE"), "Node writes files to it"),
    rule(Exact("NODE_REDIRECT_WARNINGS"), "Node writes files to it"),
    rule(Exact("NODE_REPL_HISTORY"), "Node writes files to it"),
    rule(Prefix("JITI_"), JITI),
    rule(Prefix("OPENCODE_"), OPENCODE),
    rule(
        Exact("BUN_OPTIONS"),
        "Bun-compiled binaries (Claude Code) honour --preload from it",
    ),
    rule(Prefix("BUN_CONFIG_"), "Bun reads configuration from it"),
    rule(
        Prefix("BUN_INSPECT"),
        "Bun-compiled binaries (Claude Code) run the file BUN_INSPECT_PRELOAD names before their own code, and open a debugger or connect to one for the others",
    ),
    rule(
        Exact("NAPI_RS_NATIVE_LIBRARY_PATH"),
        "napi-rs packages (pi's clipboard module) require() the file it names in place of their own native module",
    ),
    rule(Prefix("LD_"), LINKER),
    rule(Prefix("DYLD_"), LINKER),
    rule(Exact("GCONV_PATH"), LINKER),
    rule(Exact("GLIBC_TUNABLES"), LINKER),
    rule(Prefix("MALLOC_"), LINKER),
    rule(Exact("LOCPATH"), LINKER),
    rule(Exact("HOSTALIASES"), LINKER),
    rule(Exact("RES_OPTIONS"), LINKER),
    rule(Exact("LOCALDOMAIN"), LINKER),
    rule(Prefix("PYTHON"), PYTHON),
    rule(Exact("BASH_ENV"), SHELL),
    rule(Exact("ENV"), SHELL),
    rule(Prefix("BASH_FUNC_"), SHELL),
    rule(Exact("SHELLOPTS"), SHELL),
    rule(Exact("BASHOPTS"), SHELL),
    rule(Exact("PS4"), SHELL),
    rule(Exact("PROMPT_COMMAND"), SHELL),
    rule(Exact("CDPATH"), SHELL),
    rule(Exact("GLOBIGNORE"), SHELL),
    rule(Exact("IFS"), SHELL),
    rule(Exact("PERL5OPT"), OTHER_INTERP),
    rule(Exact("PERL5LIB"), OTHER_INTERP),
    rule(Exact("PERLLIB"), OTHER_INTERP),
    rule(Exact("RUBYOPT"), OTHER_INTERP),
    rule(Exact("RUBYLIB"), OTHER_INTERP),
    rule(Exact("JAVA_TOOL_OPTIONS"), OTHER_INTERP),
    rule(Exact("_JAVA_OPTIONS"), OTHER_INTERP),
    // A verified hook may be written in any language: each interpreter's variables that run
    // code at its start (where its libraries come from is trusted-only, below).
    rule(Prefix("LUA_INIT"), OTHER_INTERP),
    rule(Exact("PHPRC"), OTHER_INTERP),
    rule(Exact("PHP_INI_SCAN_DIR"), OTHER_INTERP),
    rule(Exact("DOTNET_STARTUP_HOOKS"), OTHER_INTERP),
    rule(Prefix("CORECLR_"), OTHER_INTERP),
    rule(Exact("ERL_AFLAGS"), OTHER_INTERP),
    rule(Exact("ERL_FLAGS"), OTHER_INTERP),
    rule(Exact("ERL_ZFLAGS"), OTHER_INTERP),
    rule(Prefix("R_PROFILE"), OTHER_INTERP),
    rule(Prefix("R_ENVIRON"), OTHER_INTERP),
    rule(
        Exact("CLAUDE_ENV_FILE"),
        "Claude Code sources it before every Bash command",
    ),
    rule(
        Exact("CLAUDE_CODE_PLUGIN_DIRS"),
        "Claude Code loads every plugin directory it lists at startup, as --plugin-dir does (hooks, MCP servers, skills, agents)",
    ),
    rule(
        Exact("CLAUDE_CODE_PLUGIN_SEED_DIR"),
        "Claude Code takes installed plugins and marketplaces from the directories it lists (the layout of its plugins dir) and loads those the settings enable",
    ),
    rule(
        Exact("CLAUDE_CODE_PLUGIN_CACHE_DIR"),
        "Claude Code keeps and loads its installed plugins and marketplaces there in place of its config dir's plugins/",
    ),
    rule(
        Exact("CLAUDE_CODE_PLUGIN_MCPB_DIR"),
        "Claude Code runs its plugins' MCP bundles (servers it starts) from this directory",
    ),
    rule(
        Exact("CLAUDE_CODE_USE_COWORK_PLUGINS"),
        "Claude Code reads its user settings and plugins from other entries of its config dir (cowork_settings.json, cowork_plugins/)",
    ),
    rule(
        Exact("CLAUDE_CODE_MANAGED_SETTINGS_PATH"),
        "Claude Code reads its managed settings (above every other source: hooks, env, plugins) from the folder it names",
    ),
    rule(
        Exact("CLAUDE_CODE_REMOTE_SETTINGS_PATH"),
        "Claude Code reads its remote-managed settings (hooks, env, plugins) from the file it names",
    ),
    rule(
        Exact("CLAUDE_CODE_ADDITIONAL_DIRECTORIES_CLAUDE_MD"),
        "Claude Code reads CLAUDE.md and rules of every added directory into its instructions",
    ),
    rule(
        Exact("CLAUDE_CODE_DESKTOP_SKILLS_PLUGIN_DIR"),
        "Claude Code loads skills from the plugin directory it names (desktop hosts)",
    ),
    rule(
        Exact("CLAUDE_CODE_SHOWN_PLUGINS_DIR"),
        "Claude Code reads plugins from the directory it names (hosted sessions)",
    ),
    rule(Exact("PI_PACKAGE_DIR"), RUNTIME_CODE),
    rule(Exact("PI_SELF_UPDATE_COMMAND"), RUNTIME_CODE),
    rule(
        Exact("PI_INSTALLER_API_BASE"),
        "pi update downloads the release it installs (its package.json and lockfile for npm ci) from it",
    ),
    rule(
        Exact("PI_MANAGED_INSTALL_ROOT"),
        "pi update installs and activates releases of pi under it",
    ),
    rule(
        Exact("PI_TUI_WRITE_LOG"),
        "pi's terminal UI writes everything it draws to it",
    ),
    rule(
        Prefix("NPM_CONFIG_"),
        "npm runs scripts and reads registries from it",
    ),
];

const PROXY: &str = "routes network traffic through a proxy (curl, git, Python requests, undici and Bun honour it; Node with NODE_USE_ENV_PROXY): the runtime's model traffic, API key included, would pass through whoever runs it; pitcrew sets the proxy itself, and what the agent reaches is the harness's network:";
const TOOL_PROGRAM: &str = "a tool runs the program it names (git, man, less and others)";
const CLAUDE_SHELL: &str = "Claude Code runs every Bash tool call with the shell it names";
const GIT_PROGRAM: &str = "git runs the program it names";

/// The reason of the model providers' families in [`TRUSTED_ONLY_RULES`]: AWS's config file
/// names an `endpoint_url` and a `credential_process`, Azure's resource name becomes the host,
/// Google's credentials file can name an executable.
const PROVIDER: &str =
    "a model provider's endpoint, credentials or configuration file: the runtime sends its key where it says";

/// The reason of Claude Code's tracing names in [`TRUSTED_ONLY_RULES`] (Claude Code refuses
/// them from a project's own settings for the same reason).
const TRACING: &str =
    "Claude Code's tracing: where its traces go and whether they carry prompts and tool content";

/// Names only a trusted layer (the image's environment, the harness `env:`, `--pass-env`) may
/// set: they route network traffic, change TLS trust, choose a program the runtime or its tools
/// run for every call, or redirect a configuration home. The `.env` and a plugin's `env:` may
/// not set them (a named refusal, an error). Only the two config dirs are pinned (in their
/// runtime); with no trusted layer setting one of the others it is absent and programs use
/// their default (under the pinned `HOME`). Exact names come before the prefix that also covers
/// them, so each gets its own reason.
///
/// TLS trust and proxies are here, not in [`LOADER_RULES`]: an image behind a TLS-inspecting
/// egress proxy (OpenShell, the fullsend image) sets `*_PROXY` and `NODE_USE_ENV_PROXY`, its CA
/// (`NODE_EXTRA_CA_CERTS`, `NODE_USE_SYSTEM_CA`, `SSL_CERT_FILE`, `SSL_CERT_DIR`) and sometimes
/// OpenSSL's configuration, and the runtime fails TLS without them. `OPENSSL_CONF`,
/// `OPENSSL_CONF_INCLUDE`, `OPENSSL_MODULES` and `OPENSSL_ENGINES` can make OpenSSL (Node's
/// included) load native code; they stay settable by the trusted layers because the image
/// decides what OpenSSL loads anyway (its default configuration and module directories are its
/// own files), so pointing OpenSSL at other files gives a trusted layer nothing new. A value
/// naming a path the agent can write would hand that choice to the agent; the supervisor does
/// not check for it (a known gap of `docs/threat-model.md`). `NODE_TLS_REJECT_UNAUTHORIZED`
/// keeps this list's policy too: a trusted layer may set it (the record names which one did),
/// an untrusted layer never may.
pub const TRUSTED_ONLY_RULES: &[DenyRule] = &[
    // Network routing and TLS trust.
    rule(
        Exact("NODE_USE_ENV_PROXY"),
        "makes Node's fetch and http honour the *_PROXY variables",
    ),
    rule(Suffix("_PROXY"), PROXY),
    rule(
        Exact("NODE_USE_SYSTEM_CA"),
        "makes Node trust the system certificate store: changes TLS trust",
    ),
    rule(
        Exact("NODE_EXTRA_CA_CERTS"),
        "Node and Bun trust extra certificates from it",
    ),
    rule(
        Exact("NODE_TLS_REJECT_UNAUTHORIZED"),
        "Node and Bun accept any certificate with 0, an intercepting proxy's included",
    ),
    rule(
        Exact("SSL_CERT_FILE"),
        "OpenSSL-based tools (curl, git, Python) trust the certificates of this file",
    ),
    rule(
        Exact("SSL_CERT_DIR"),
        "OpenSSL-based tools (curl, git, Python) trust the certificates in these directories",
    ),
    rule(
        Prefix("SSL_"),
        "TLS libraries and tools read certificates and TLS settings from it",
    ),
    rule(
        Exact("SSLKEYLOGFILE"),
        "TLS libraries write their session keys to it",
    ),
    rule(
        Exact("REQUESTS_CA_BUNDLE"),
        "Python requests trusts certificates from it",
    ),
    rule(
        Exact("CURL_CA_BUNDLE"),
        "curl and Python requests trust certificates from it",
    ),
    rule(
        Exact("OPENSSL_CONF"),
        "OpenSSL (Node's included) reads its configuration from it: trust, protocol options, and providers and engines it loads as native code",
    ),
    rule(
        Exact("OPENSSL_CONF_INCLUDE"),
        "OpenSSL resolves the relative includes of its configuration against it",
    ),
    rule(
        Exact("OPENSSL_MODULES"),
        "OpenSSL loads its providers (native code) from this directory",
    ),
    rule(
        Exact("OPENSSL_ENGINES"),
        "OpenSSL loads its engines (native code) from this directory",
    ),
    rule(
        Prefix("OPENSSL_"),
        "OpenSSL reads other controls from it (CPU capabilities, tracing)",
    ),
    rule(
        Exact("CURL_HOME"),
        "curl reads .curlrc (proxy, certificates, headers) from it",
    ),
    rule(
        Exact("WGETRC"),
        "wget reads its configuration (proxy, certificates) from it",
    ),
    rule(
        Exact("NETRC"),
        "curl, git and Python requests send the credentials of this file",
    ),
    rule(
        Suffix("_BASE_URL"),
        "redirects a provider's API endpoint (ANTHROPIC_BASE_URL, OPENAI_BASE_URL, …), with its API key",
    ),
    rule(
        Prefix("AWS_ENDPOINT_URL"),
        "redirects AWS API calls (Bedrock), with their credentials",
    ),
    rule(
        Prefix("ACTIONS_ID_TOKEN_REQUEST_"),
        "the runner's identity-token request (with its bearer token) goes where it says",
    ),
    rule(
        Prefix("ANTHROPIC_"),
        "Claude Code's provider configuration: endpoint, credentials, headers, model",
    ),
    rule(Prefix("AWS_"), PROVIDER),
    rule(Prefix("GOOGLE_"), PROVIDER),
    rule(Prefix("GCLOUD_"), PROVIDER),
    rule(Prefix("CLOUDSDK_"), PROVIDER),
    rule(Prefix("GCE_METADATA_"), PROVIDER),
    rule(Prefix("AZURE_"), PROVIDER),
    rule(Prefix("OPENAI_"), PROVIDER),
    rule(Prefix("XAI_"), PROVIDER),
    rule(Prefix("GEMINI_"), PROVIDER),
    rule(Prefix("GROQ_"), PROVIDER),
    rule(Prefix("CEREBRAS_"), PROVIDER),
    rule(Prefix("MISTRAL_"), PROVIDER),
    rule(Prefix("MINIMAX_"), PROVIDER),
    rule(Prefix("OPENROUTER_"), PROVIDER),
    rule(Prefix("DEEPSEEK_"), PROVIDER),
    rule(Prefix("KIMI_"), PROVIDER),
    rule(Prefix("ZAI_"), PROVIDER),
    rule(Prefix("AI_GATEWAY_"), PROVIDER),
    rule(Prefix("OPENCODE_"), PROVIDER),
    rule(Prefix("CLOUDFLARE_"), PROVIDER),
    rule(Prefix("COPILOT_"), PROVIDER),
    rule(Exact("CLOUD_ML_REGION"), PROVIDER),
    rule(Exact("METADATA_SERVER_DETECTION"), PROVIDER),
    rule(Exact("HF_TOKEN"), PROVIDER),
    rule(
        Exact("SESSION_INGRESS_URL"),
        "Claude Code sends its session traffic to it in place of ANTHROPIC_BASE_URL",
    ),
    rule(
        Prefix("GH_"),
        "the GitHub CLI's and Claude Code's host, tokens and configuration: Claude Code sends GH_ENTERPRISE_TOKEN to the host GH_HOST names",
    ),
    // Telemetry and debug output.
    rule(
        Prefix("OTEL_"),
        "OpenTelemetry (Claude Code's telemetry): the exporters' endpoint, their headers (a bearer token), TLS trust and client key, and whether prompts, tool content and API bodies go out",
    ),
    rule(
        Prefix("ANT_OTEL_"),
        "Claude Code reads it in place of the OTEL_ name that follows ANT_",
    ),
    rule(Exact("BETA_TRACING_ENDPOINT"), TRACING),
    rule(Exact("ENABLE_BETA_TRACING_DETAILED"), TRACING),
    rule(Exact("ENABLE_ENHANCED_TELEMETRY_BETA"), TRACING),
    rule(
        Prefix("GRPC_"),
        "gRPC (the OTLP gRPC exporter) reads its TLS roots (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH), ciphers, resolver and traces from it",
    ),
    rule(
        Prefix("NODE_DEBUG"),
        "makes Node's core modules (http, net, tls, fetch) print what they do, hosts and URLs included, into the runtime's stderr, which the record keeps",
    ),
    rule(
        Prefix("DEBUG"),
        "makes the debug module (proxy agents and SDKs in pi and Claude Code) and google-auth print what they do, a proxy URL's credentials included, into the runtime's stderr, which the record keeps",
    ),
    rule(
        Prefix("BUN_"),
        "Bun-compiled binaries (Claude Code) read their runtime controls from it: JavaScriptCore options, crash-report URL, feature flags",
    ),
    // Programs the runtime or its tools run.
    rule(Exact("SHELL"), CLAUDE_SHELL),
    rule(Exact("CLAUDE_CODE_SHELL"), CLAUDE_SHELL),
    rule(
        Exact("CLAUDE_CODE_SHELL_PREFIX"),
        "Claude Code prefixes every shell command with it",
    ),
    rule(
        Exact("CLAUDE_CONFIG_DIR"),
        "Claude Code reads settings, hooks and plugins from it (pinned for the claude runtime)",
    ),
    rule(
        Prefix("CLAUDE_"),
        "Claude Code's configuration (shell, config dir, provider switches) is the operator's",
    ),
    rule(
        Exact("PI_CODING_AGENT_DIR"),
        "pi reads settings and models (which can run commands) from it (pinned for the pi runtime)",
    ),
    rule(
        Exact("CODEX_HOME"),
        "Codex reads config.toml, hooks, skills, rules and AGENTS.md from it (pinned for the codex runtime)",
    ),
    rule(
        Exact("CODEX_CA_CERTIFICATE"),
        "Codex trusts the certificate authorities of the file it names for its model connections",
    ),
    rule(
        Prefix("CODEX_"),
        "the Codex CLI's configuration (home, sandbox, network switches) is the operator's",
    ),
    rule(
        Prefix("PI_"),
        "pi's configuration (agent dir, offline mode, packages) is the operator's",
    ),
    rule(
        Exact("USE_BUILTIN_RIPGREP"),
        "Claude Code runs rg from PATH instead of its own with it",
    ),
    rule(
        Exact("RIPGREP_CONFIG_PATH"),
        "ripgrep (the runtimes' grep tool) reads flags from it; --pre runs a program for every file",
    ),
    rule(
        Exact("ZDOTDIR"),
        "zsh sources .zshenv from it for every shell",
    ),
    rule(Exact("TCLLIBPATH"), INTERP_LIBS),
    rule(Prefix("LUA_PATH"), INTERP_LIBS),
    rule(Prefix("LUA_CPATH"), INTERP_LIBS),
    rule(Exact("GEM_HOME"), INTERP_LIBS),
    rule(Exact("GEM_PATH"), INTERP_LIBS),
    rule(Exact("ERL_LIBS"), INTERP_LIBS),
    rule(Prefix("R_LIBS"), INTERP_LIBS),
    rule(Exact("AWKPATH"), INTERP_LIBS),
    rule(Exact("AWKLIBPATH"), INTERP_LIBS),
    rule(Exact("GIT_SSH"), GIT_PROGRAM),
    rule(Exact("GIT_SSH_COMMAND"), GIT_PROGRAM),
    rule(Exact("GIT_PROXY_COMMAND"), GIT_PROGRAM),
    rule(Exact("GIT_EXTERNAL_DIFF"), GIT_PROGRAM),
    rule(Exact("GIT_PAGER"), GIT_PROGRAM),
    rule(Exact("GIT_EDITOR"), GIT_PROGRAM),
    rule(Exact("GIT_SEQUENCE_EDITOR"), GIT_PROGRAM),
    rule(Exact("GIT_ASKPASS"), GIT_PROGRAM),
    rule(
        Exact("GIT_EXEC_PATH"),
        "git runs its sub-commands from it",
    ),
    rule(
        Exact("GIT_TEMPLATE_DIR"),
        "git copies hooks from it into every new repository",
    ),
    rule(
        Prefix("GIT_CONFIG"),
        "git reads configuration from it (core.sshCommand, core.pager, core.fsmonitor run programs)",
    ),
    rule(
        Prefix("GIT_"),
        "git's environment is the operator's (programs, configuration, TLS trust: GIT_SSL_*)",
    ),
    rule(Exact("PAGER"), TOOL_PROGRAM),
    rule(Exact("MANPAGER"), TOOL_PROGRAM),
    rule(Exact("EDITOR"), TOOL_PROGRAM),
    rule(Exact("VISUAL"), TOOL_PROGRAM),
    rule(Exact("BROWSER"), TOOL_PROGRAM),
    rule(
        Prefix("LESS"),
        "less runs LESSOPEN and LESSCLOSE as input filters and reads options and key bindings from LESS*",
    ),
    rule(
        Exact("VIMINIT"),
        "vim runs the commands in it (:! runs programs)",
    ),
    rule(
        Exact("EXINIT"),
        "vi runs the commands in it (:! runs programs)",
    ),
    rule(Prefix("SSH_ASKPASS"), "ssh runs the program it names"),
    rule(
        Prefix("XDG_"),
        "configuration and data homes: git and other tools read configuration (which can name programs) from them",
    ),
    // Namespaces of the supervisor, the runner and its security hook.
    rule(Prefix("PITCREW_"), "the supervisor's namespace"),
    rule(Prefix("FULLSEND_"), "the runner's namespace"),
    rule(Prefix("TIRITH_"), "the security hook's namespace"),
];

/// Names a plugin's `env:` block may not set beyond [`LOADER_RULES`] and
/// [`TRUSTED_ONLY_RULES`]: process basics, the runner's and the providers' families, and
/// anything credential-shaped.
pub const PLUGIN_ENV_RULES: &[DenyRule] = &[
    rule(Exact("PATH"), "process basics are the runner's"),
    rule(Exact("HOME"), "process basics are the runner's"),
    rule(Exact("TMPDIR"), "process basics are the runner's"),
    rule(Exact("GOPROXY"), "changes where code is fetched from"),
    rule(Exact("GOFLAGS"), "changes how code is built"),
    rule(Prefix("NODE_"), "the Node family is the runner's"),
    rule(Suffix("_API_KEY"), "credential-shaped"),
    rule(Suffix("_TOKEN"), "credential-shaped"),
    rule(Contains("_SECRET"), "credential-shaped"),
];

/// The reason of a [`SANDBOX_ENV_RULES`] entry for a name the supervisor pins (a unit test
/// checks that each such name is pinned).
pub const PINNED: &str = "pinned by the supervisor";

/// Names the harness `env:` block (the sandbox environment) may not set, beyond
/// [`LOADER_RULES`] (which the supervisor would strip anyway: refusing them at validation keeps
/// that from being a silent drop). The harness is a trusted layer: [`TRUSTED_ONLY_RULES`] do not
/// apply to it.
pub const SANDBOX_ENV_RULES: &[DenyRule] = &[
    rule(Exact("PATH"), PINNED),
    rule(Exact("HOME"), PINNED),
    rule(Exact("TMPDIR"), PINNED),
    rule(Exact("JITI_FS_CACHE"), PINNED),
    rule(Exact("PI_CODING_AGENT_DIR"), PINNED),
    rule(Exact("PI_CODING_AGENT_SESSION_DIR"), PINNED),
    rule(Exact("PI_OFFLINE"), PINNED),
    rule(Exact("PI_SKIP_VERSION_CHECK"), PINNED),
    rule(Exact("PI_TELEMETRY"), PINNED),
    rule(Exact("NODE_DISABLE_COMPILE_CACHE"), PINNED),
    rule(Exact("DISABLE_AUTOUPDATER"), PINNED),
    rule(Exact("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"), PINNED),
    rule(Exact("CLAUDE_CODE_DISABLE_BUNDLED_SKILLS"), PINNED),
    rule(Exact("CLAUDE_CODE_DISABLE_AUTO_MEMORY"), PINNED),
    rule(
        Exact("CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL"),
        PINNED,
    ),
    rule(Exact("CLAUDE_CODE_DISABLE_CLAUDE_MDS"), PINNED),
    rule(Exact("CLAUDE_CODE_DISABLE_GIT_INSTRUCTIONS"), PINNED),
    rule(Exact("CLAUDE_CODE_SIMPLE"), PINNED),
    rule(Exact("CLAUDE_CODE_SAFE_MODE"), PINNED),
    rule(Exact("CLAUDE_CONFIG_DIR"), PINNED),
    rule(Exact("CODEX_HOME"), PINNED),
    rule(Exact("OPENCODE_CONFIG_DIR"), PINNED),
    rule(Exact("BUN_RUNTIME_TRANSPILER_CACHE_PATH"), PINNED),
    rule(Prefix("PITCREW_"), "the supervisor's namespace"),
    rule(Prefix("FULLSEND_"), "the runner's namespace"),
    rule(
        Exact("ACTIONS_ID_TOKEN_REQUEST_URL"),
        "identity token plumbing is the runner's",
    ),
    rule(
        Exact("ACTIONS_ID_TOKEN_REQUEST_TOKEN"),
        "identity token plumbing is the runner's",
    ),
];

/// Why the harness `env:` may not set a proxy variable.
const PITCREW_PROXY: &str =
    "pitcrew sets the agent's proxy itself; where the agent connects is the harness's network:";

/// Why the harness `env:` may not change TLS trust.
const PITCREW_TLS: &str = "TLS runs end to end through pitcrew's proxy, to the certificates the image trusts; where the agent connects is the harness's network:";

/// Why the harness `env:` may not choose how git connects.
const PITCREW_GIT: &str = "git would connect through the program it names, past pitcrew's proxy; where git connects is the harness's network:";

/// Names the harness `env:` may not set beyond [`SANDBOX_ENV_RULES`]: the proxy variables
/// pitcrew itself sets for the agent, the TLS trust its connections rely on, and the programs
/// git would connect through. With egress control, where the agent's connections go is the
/// harness's `network:` and nothing else; the `.env` and a plugin's `env:` are refused them by
/// [`TRUSTED_ONLY_RULES`] already. The image's environment and `--pass-env` keep them (a site's
/// own proxy or CA for `network: open`, an image behind a TLS-inspecting proxy). Endpoint
/// variables (`ANTHROPIC_BASE_URL`) stay the harness's: the default network follows them.
pub const EGRESS_ENV_RULES: &[DenyRule] = &[
    rule(Exact("HTTP_PROXY"), PITCREW_PROXY),
    rule(Exact("HTTPS_PROXY"), PITCREW_PROXY),
    rule(Exact("ALL_PROXY"), PITCREW_PROXY),
    rule(Exact("NO_PROXY"), PITCREW_PROXY),
    rule(Exact("FTP_PROXY"), PITCREW_PROXY),
    rule(Exact("GRPC_PROXY"), PITCREW_PROXY),
    rule(Exact("RSYNC_PROXY"), PITCREW_PROXY),
    rule(Exact("NODE_USE_ENV_PROXY"), PITCREW_PROXY),
    rule(Exact("NODE_EXTRA_CA_CERTS"), PITCREW_TLS),
    rule(Exact("SSL_CERT_FILE"), PITCREW_TLS),
    rule(Exact("CODEX_CA_CERTIFICATE"), PITCREW_TLS),
    rule(Exact("SSL_CERT_DIR"), PITCREW_TLS),
    rule(Exact("REQUESTS_CA_BUNDLE"), PITCREW_TLS),
    rule(Exact("CURL_CA_BUNDLE"), PITCREW_TLS),
    rule(Exact("GIT_SSL_CAINFO"), PITCREW_TLS),
    rule(Exact("GIT_SSL_CAPATH"), PITCREW_TLS),
    rule(Exact("GIT_PROXY_COMMAND"), PITCREW_GIT),
    rule(Exact("GIT_SSH_COMMAND"), PITCREW_GIT),
    rule(Exact("GIT_SSH"), PITCREW_GIT),
];

/// The first loader rule that matches `name`, if any.
pub fn loader_denial(name: &str) -> Option<&'static DenyRule> {
    LOADER_RULES.iter().find(|r| r.pattern.matches(name))
}

/// The first trusted-only rule that forbids an untrusted layer (the `.env`, a plugin's `env:`)
/// from setting `name`, if any.
pub fn untrusted_denial(name: &str) -> Option<&'static DenyRule> {
    TRUSTED_ONLY_RULES.iter().find(|r| r.pattern.matches(name))
}

/// The first rule that forbids a plugin's `env:` from setting `name`, if any.
pub fn plugin_env_denial(name: &str) -> Option<&'static DenyRule> {
    loader_denial(name)
        .or_else(|| untrusted_denial(name))
        .or_else(|| PLUGIN_ENV_RULES.iter().find(|r| r.pattern.matches(name)))
}

/// The first rule that forbids `--pass-env` from passing `name`, if any: the reserved names
/// and the loader rules.
pub fn sandbox_env_reserved(name: &str) -> Option<&'static DenyRule> {
    SANDBOX_ENV_RULES
        .iter()
        .find(|r| r.pattern.matches(name))
        .or_else(|| loader_denial(name))
}

/// The first rule that forbids the harness `env:` from setting `name`, if any: those of
/// [`sandbox_env_reserved`], then [`EGRESS_ENV_RULES`].
pub fn harness_env_denial(name: &str) -> Option<&'static DenyRule> {
    sandbox_env_reserved(name).or_else(|| EGRESS_ENV_RULES.iter().find(|r| r.pattern.matches(name)))
}

/// The runner namespaces: the prefixes of the names `pitcrew run --runner-env` may set (the
/// manifest's `env.runner`). The runner that starts pitcrew hands its hook adapter per-run
/// values under them (a manifest digest, a tool allowlist, a canary, an output dir). No other
/// layer may set them: the `.env` and a plugin's `env:` are refused by
/// [`TRUSTED_ONLY_RULES`], the harness `env:` by [`SANDBOX_ENV_RULES`].
pub const RUNNER_PREFIXES: &[&str] = &["FULLSEND_"];

/// Every problem with one `--runner-env` entry (the manifest's `env.runner`): a name that is
/// not an upper-case environment name, one outside [`RUNNER_PREFIXES`], a loader control, or a value with a newline, carriage return
/// or NUL.
pub fn runner_env_problems(name: &str, value: &str) -> Vec<EnvProblem> {
    let mut problems = Vec::new();
    if !is_valid_name(name) {
        problems.push(EnvProblem::BadName(name.to_string()));
    } else if !RUNNER_PREFIXES.iter().any(|p| name.starts_with(p)) {
        problems.push(EnvProblem::NotRunner(name.to_string()));
    }
    if let Some(rule) = loader_denial(name) {
        problems.push(EnvProblem::Denied {
            name: name.to_string(),
            rule,
        });
    }
    problems.extend(value_problem(name, value));
    problems
}

/// What is wrong with an environment entry's name or value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvProblem {
    /// The name is not `^[A-Z_][A-Z0-9_]*$`.
    #[error("name {0:?} is not an upper-case environment name (^[A-Z_][A-Z0-9_]*$)")]
    BadName(String),
    /// The name is refused by a deny rule.
    #[error("name {name} is refused: matches {rule}")]
    Denied {
        /// The refused name.
        name: String,
        /// The rule that refused it.
        rule: &'static DenyRule,
    },
    /// A `--runner-env` name outside the runner namespaces ([`RUNNER_PREFIXES`]).
    #[error("name {0} is not in a runner namespace ({prefixes}): --runner-env sets only those", prefixes = runner_prefixes())]
    NotRunner(String),
    /// The value contains a newline, carriage return or NUL.
    #[error("value of {0} contains a newline, carriage return or NUL")]
    BadValue(String),
}

fn runner_prefixes() -> String {
    RUNNER_PREFIXES
        .iter()
        .map(|p| format!("{p}*"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `name` is a valid environment name for a harness: `^[A-Z_][A-Z0-9_]*$`.
pub fn is_valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b'A'..=b'Z' | b'_'))
        && bytes.all(|b| matches!(b, b'A'..=b'Z' | b'0'..=b'9' | b'_'))
}

fn value_problem(name: &str, value: &str) -> Option<EnvProblem> {
    value
        .contains(['\n', '\r', '\0'])
        .then(|| EnvProblem::BadValue(name.to_string()))
}

/// Every problem with one entry of a plugin's `env:` block.
pub fn plugin_env_problems(name: &str, value: &str) -> Vec<EnvProblem> {
    entry_problems(name, value, plugin_env_denial)
}

/// Every problem with one name and value the manifest's `env.set` carries (the supervisor's
/// check: the reserved names and the loader rules).
pub fn sandbox_env_problems(name: &str, value: &str) -> Vec<EnvProblem> {
    entry_problems(name, value, sandbox_env_reserved)
}

/// Every problem with one entry of the harness `env:` block (or a task's override of it): those
/// of [`sandbox_env_problems`] and the names of [`EGRESS_ENV_RULES`].
pub fn harness_env_problems(name: &str, value: &str) -> Vec<EnvProblem> {
    entry_problems(name, value, harness_env_denial)
}

fn entry_problems(
    name: &str,
    value: &str,
    deny: fn(&str) -> Option<&'static DenyRule>,
) -> Vec<EnvProblem> {
    let mut problems = Vec::new();
    if !is_valid_name(name) {
        problems.push(EnvProblem::BadName(name.to_string()));
    }
    if let Some(rule) = deny(name) {
        problems.push(EnvProblem::Denied {
            name: name.to_string(),
            rule,
        });
    }
    problems.extend(value_problem(name, value));
    problems
}

pub mod agent_args;
pub mod claude_options;
pub mod codex_options;
pub mod opencode_options;
pub mod pi_options;

pub use agent_args::{agent_args_problems, Against, AgentArgProblem};

/// The supported pi releases (of [`pi_options::PI_RELEASES`]) of which `name` (`--model`, `-e`,
/// `--`) is an own option, oldest first; empty when it is an option of none.
///
/// A plugin's `pi.args` may set none of them: they would change what pi loads, which model it
/// talks to or how its output is read. The tables are generated from each release's `--help` by
/// `scripts/pi-options`; a harness may run on any of the releases, so an option of one is
/// refused for all.
pub fn pi_own_option_releases(name: &str) -> Vec<&'static str> {
    pi_options::PI_RELEASES
        .iter()
        .filter(|(_, options)| agent_args::find(options, name).is_some())
        .map(|(version, _)| *version)
        .collect()
}

/// What is wrong with one element of a plugin's `pi.args`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PiArgProblem {
    /// Not of the form `--flag` or `--flag=value`.
    #[error("{0:?} is not --flag or --flag=value (letters, digits, '.', '_', '-')")]
    NotAFlag(String),
    /// One of pi's own options (long name or short alias) in at least one supported release.
    #[error("{flag} is one of pi's own options ({releases}), not an extension flag")]
    PiOwnOption {
        /// The option as written, without any `=value`.
        flag: String,
        /// The releases that have it, comma-separated (`0.87.1, 1.6.0`).
        releases: String,
    },
    /// `--` alone: pi 0.73.1 reads it as an unknown option, later releases end their options
    /// with it, so every argument after it would be read as the prompt.
    #[error("-- ends pi's options (0.87.1 on; 0.73.1 reads it as an unknown option): what follows would be read as the prompt")]
    EndOfOptions,
    /// A bare word that does not directly follow a `--flag` without `=`; pi would take it as
    /// (part of) the prompt.
    #[error("bare word {0:?} must directly follow a --flag without '=' (pi would read it as the prompt)")]
    StrayWord(String),
    /// A value starting with `-` (pi would read it as an option) or `@` (pi attaches a file).
    #[error("value {0:?} starts with '-' or '@' (pi reads it as an option or a file attachment)")]
    BadValue(String),
    /// A newline, carriage return or NUL.
    #[error("{0:?} contains a newline, carriage return or NUL")]
    ControlCharacter(String),
    /// A flag the extension does not register, so pi would exit with `Unknown option`.
    #[error("{flag} is not registered by this extension (registered: {registered})")]
    Unregistered {
        /// The flag as written.
        flag: String,
        /// The flags the extension registers, comma-separated (or `none`).
        registered: String,
    },
}

/// The flag name of a `--flag` or `--flag=value` element (`flag`), if it is one.
pub fn pi_flag_name(arg: &str) -> Option<&str> {
    let rest = arg.strip_prefix("--")?;
    let name = rest.split_once('=').map_or(rest, |(n, _)| n);
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    (first_ok && rest_ok).then_some(name)
}

/// Every problem with a plugin's `pi.args`, as `(index, problem)`.
///
/// `registered` is the set of flag names the extension registers (from a static scan of its
/// sources); `None` skips that check.
pub fn pi_args_problems(
    args: &[String],
    registered: Option<&[String]>,
) -> Vec<(usize, PiArgProblem)> {
    let mut problems = Vec::new();
    // Whether the previous element was a `--flag` without `=` that may take one bare value.
    let mut value_may_follow = false;
    for (i, arg) in args.iter().enumerate() {
        if arg.contains(['\n', '\r', '\0']) {
            problems.push((i, PiArgProblem::ControlCharacter(arg.clone())));
            value_may_follow = false;
            continue;
        }
        if arg == "--" {
            problems.push((i, PiArgProblem::EndOfOptions));
            value_may_follow = false;
            continue;
        }
        if arg.starts_with('-') {
            // pi's own options by the name before any `=`: long names, and the short aliases
            // (`-e`, `-na`) that are not `--flag` at all.
            let own = match arg.split_once('=').map_or(arg.as_str(), |(n, _)| n) {
                "--" => Vec::new(), // `--=x`: not an option of pi's, refused below as not a --flag
                name => pi_own_option_releases(name),
            };
            let Some(name) = pi_flag_name(arg) else {
                let problem = if own.is_empty() {
                    PiArgProblem::NotAFlag(arg.clone())
                } else {
                    own_option(arg, &own)
                };
                problems.push((i, problem));
                value_may_follow = false;
                continue;
            };
            let flag = format!("--{name}");
            if !own.is_empty() {
                problems.push((i, own_option(&flag, &own)));
            } else if let Some(registered) = registered {
                if !registered.iter().any(|r| r == name) {
                    let list = if registered.is_empty() {
                        "none".to_string()
                    } else {
                        registered
                            .iter()
                            .map(|r| format!("--{r}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    };
                    problems.push((
                        i,
                        PiArgProblem::Unregistered {
                            flag: flag.clone(),
                            registered: list,
                        },
                    ));
                }
            }
            match arg.split_once('=') {
                Some((_, value)) => {
                    if value.starts_with(['-', '@']) {
                        problems.push((i, PiArgProblem::BadValue(value.to_string())));
                    }
                    value_may_follow = false;
                }
                None => value_may_follow = true,
            }
        } else if value_may_follow {
            if arg.starts_with('@') {
                problems.push((i, PiArgProblem::BadValue(arg.clone())));
            }
            value_may_follow = false;
        } else {
            problems.push((i, PiArgProblem::StrayWord(arg.clone())));
        }
    }
    problems
}

/// [`PiArgProblem::PiOwnOption`] of `arg` (its name before any `=`), an option of `releases`.
fn own_option(arg: &str, releases: &[&str]) -> PiArgProblem {
    PiArgProblem::PiOwnOption {
        flag: arg.split_once('=').map_or(arg, |(n, _)| n).to_string(),
        releases: releases.join(", "),
    }
}

#[cfg(test)]
pub(crate) mod tests;
