//! Environment and argument policy, defined once for the host (validation) and the supervisor
//! (the environment step).
//!
//! Three lists live here:
//! - [`loader_denial`]: variables the supervisor strips from every agent environment because they
//!   make an interpreter or the dynamic linker load code, or change what the runtime trusts
//!   (`NODE_OPTIONS`, every `JITI_*`, `LD_*`, `BUN_OPTIONS`, `PYTHON*`, `BASH_FUNC_*`, …).
//! - [`plugin_env_denial`]: names a plugin's `env:` block may not set (the loader families plus
//!   the runner's, the providers' and anything credential- or proxy-shaped).
//! - [`sandbox_env_reserved`]: names the harness `env:` block may not set.
//!
//! All matching is ASCII case-insensitive: a lower-case `node_options` is refused like the real
//! one, so nobody has to reason about which programs read which spelling.

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
const OPENSSL: &str = "OpenSSL loads native code from it";
const RUNTIME_CODE: &str = "the agent runtime executes or loads code from it";
const GIT: &str = "git runs programs or reads config from it";

/// Variables stripped from every agent environment by the supervisor's environment step.
///
/// These are loader and interpreter controls: whoever sets them runs code inside the agent or
/// its tools, whatever the verified trees say. `JITI_FS_CACHE` is stripped too and then pinned
/// to `false` by the runner pins.
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
    rule(
        Exact("NODE_EXTRA_CA_CERTS"),
        "Node trusts extra certificates from it",
    ),
    rule(
        Exact("NODE_TLS_REJECT_UNAUTHORIZED"),
        "Node disables TLS verification with it",
    ),
    rule(Exact("NODE_V8_COVERAGE"), "Node writes files to it"),
    rule(Exact("NODE_REDIRECT_WARNINGS"), "Node writes files to it"),
    rule(Exact("NODE_REPL_HISTORY"), "Node writes files to it"),
    rule(Prefix("JITI_"), JITI),
    rule(
        Exact("BUN_OPTIONS"),
        "Bun-compiled binaries (Claude Code) honour --preload from it",
    ),
    rule(Prefix("BUN_CONFIG_"), "Bun reads configuration from it"),
    rule(Prefix("LD_"), LINKER),
    rule(Prefix("DYLD_"), LINKER),
    rule(Exact("GCONV_PATH"), LINKER),
    rule(Exact("GLIBC_TUNABLES"), LINKER),
    rule(Prefix("MALLOC_"), LINKER),
    rule(Exact("LOCPATH"), LINKER),
    rule(Exact("HOSTALIASES"), LINKER),
    rule(Exact("RES_OPTIONS"), LINKER),
    rule(Exact("LOCALDOMAIN"), LINKER),
    rule(Prefix("OPENSSL_"), OPENSSL),
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
    rule(
        Exact("CLAUDE_ENV_FILE"),
        "Claude Code sources it before every Bash command",
    ),
    rule(
        Exact("CLAUDE_CODE_SHELL_PREFIX"),
        "Claude Code prefixes every shell command with it",
    ),
    rule(Exact("PI_PACKAGE_DIR"), RUNTIME_CODE),
    rule(Exact("PI_SELF_UPDATE_COMMAND"), RUNTIME_CODE),
    rule(Exact("GIT_SSH_COMMAND"), GIT),
    rule(Exact("GIT_EXEC_PATH"), GIT),
    rule(Exact("GIT_ASKPASS"), GIT),
    rule(Prefix("GIT_CONFIG"), GIT),
    rule(
        Prefix("NPM_CONFIG_"),
        "npm runs scripts and reads registries from it",
    ),
];

/// Names a plugin's `env:` block may not set, beyond [`LOADER_RULES`]: process basics, the
/// runner's and the providers' families, and anything credential- or proxy-shaped.
pub const PLUGIN_ENV_RULES: &[DenyRule] = &[
    rule(Exact("PATH"), "process basics are the runner's"),
    rule(Exact("HOME"), "process basics are the runner's"),
    rule(Exact("TMPDIR"), "process basics are the runner's"),
    rule(Exact("SHELL"), "process basics are the runner's"),
    rule(
        Exact("CLOUD_ML_REGION"),
        "provider configuration is the runner's",
    ),
    rule(Exact("SSLKEYLOGFILE"), "leaks TLS session keys"),
    rule(Exact("REQUESTS_CA_BUNDLE"), "changes TLS trust"),
    rule(Exact("CURL_CA_BUNDLE"), "changes TLS trust"),
    rule(Exact("GOPROXY"), "changes where code is fetched from"),
    rule(Exact("GOFLAGS"), "changes how code is built"),
    rule(Prefix("NODE_"), "the Node family is the runner's"),
    rule(Prefix("SSL_"), "changes TLS trust"),
    rule(Prefix("PI_"), "pi's own configuration is the runner's"),
    rule(Prefix("PITCREW_"), "the supervisor's namespace"),
    rule(Prefix("FULLSEND_"), "the runner's namespace"),
    rule(Prefix("TIRITH_"), "the security hook's namespace"),
    rule(Prefix("GOOGLE_"), "provider credentials and configuration"),
    rule(Prefix("GCLOUD_"), "provider credentials and configuration"),
    rule(
        Prefix("CLOUDSDK_"),
        "provider credentials and configuration",
    ),
    rule(Prefix("GIT_"), "git configuration is the runner's"),
    rule(
        Prefix("ANTHROPIC_"),
        "provider credentials and configuration",
    ),
    rule(
        Prefix("CLAUDE_"),
        "Claude Code configuration is the runner's",
    ),
    rule(Prefix("XAI_"), "provider credentials and configuration"),
    rule(Prefix("OPENAI_"), "provider credentials and configuration"),
    rule(Prefix("AZURE_"), "provider credentials and configuration"),
    rule(Prefix("AWS_"), "provider credentials and configuration"),
    rule(Suffix("_PROXY"), "proxy-shaped: redirects network traffic"),
    rule(Suffix("_API_KEY"), "credential-shaped"),
    rule(Suffix("_TOKEN"), "credential-shaped"),
    rule(Contains("_SECRET"), "credential-shaped"),
];

/// Names the harness `env:` block (the sandbox environment) may not set, beyond
/// [`LOADER_RULES`] (which the supervisor would strip anyway: refusing them at validation keeps
/// that from being a silent drop).
pub const SANDBOX_ENV_RULES: &[DenyRule] = &[
    rule(Exact("PATH"), "pinned by the supervisor"),
    rule(Exact("HOME"), "pinned by the supervisor"),
    rule(Exact("SHELL"), "pinned by the supervisor"),
    rule(Exact("TMPDIR"), "pinned by the supervisor"),
    rule(Exact("JITI_FS_CACHE"), "pinned to false by the supervisor"),
    rule(Exact("PI_CODING_AGENT_DIR"), "pinned by the supervisor"),
    rule(
        Exact("PI_CODING_AGENT_SESSION_DIR"),
        "pinned by the supervisor",
    ),
    rule(Exact("PI_OFFLINE"), "pinned by the supervisor"),
    rule(Exact("PI_SKIP_VERSION_CHECK"), "pinned by the supervisor"),
    rule(Exact("PI_TELEMETRY"), "pinned by the supervisor"),
    rule(
        Exact("NODE_DISABLE_COMPILE_CACHE"),
        "pinned by the supervisor",
    ),
    rule(Exact("DISABLE_AUTOUPDATER"), "pinned by the supervisor"),
    rule(
        Exact("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"),
        "pinned by the supervisor",
    ),
    rule(Exact("CLAUDE_CONFIG_DIR"), "pinned by the supervisor"),
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

/// The first loader rule that matches `name`, if any.
pub fn loader_denial(name: &str) -> Option<&'static DenyRule> {
    LOADER_RULES.iter().find(|r| r.pattern.matches(name))
}

/// The first rule that forbids a plugin's `env:` from setting `name`, if any.
pub fn plugin_env_denial(name: &str) -> Option<&'static DenyRule> {
    loader_denial(name).or_else(|| PLUGIN_ENV_RULES.iter().find(|r| r.pattern.matches(name)))
}

/// The first rule that forbids the harness `env:` from setting `name`, if any.
pub fn sandbox_env_reserved(name: &str) -> Option<&'static DenyRule> {
    SANDBOX_ENV_RULES
        .iter()
        .find(|r| r.pattern.matches(name))
        .or_else(|| loader_denial(name))
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
    /// The value contains a newline, carriage return or NUL.
    #[error("value of {0} contains a newline, carriage return or NUL")]
    BadValue(String),
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

/// Every problem with one entry of the harness `env:` block.
pub fn sandbox_env_problems(name: &str, value: &str) -> Vec<EnvProblem> {
    entry_problems(name, value, sandbox_env_reserved)
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

/// pi's own command-line options: a plugin's `pi.args` may never set one of these, since they
/// would change what pi loads, which model it talks to or how its output is read.
pub const PI_OWN_OPTIONS: &[&str] = &[
    "--extension",
    "--no-extensions",
    "--approve",
    "--no-approve",
    "--tools",
    "--no-tools",
    "--no-builtin-tools",
    "--exclude-tools",
    "--model",
    "--models",
    "--provider",
    "--thinking",
    "--api-key",
    "--system-prompt",
    "--append-system-prompt",
    "--session",
    "--session-dir",
    "--session-id",
    "--no-session",
    "--continue",
    "--resume",
    "--fork",
    "--name",
    "--skill",
    "--no-skills",
    "--prompt-template",
    "--no-prompt-templates",
    "--theme",
    "--use-theme",
    "--no-themes",
    "--tui-mode",
    "--no-context-files",
    "--mode",
    "--print",
    "--offline",
    "--verbose",
    "--export",
    "--list-models",
    "--help",
    "--version",
];

/// What is wrong with one element of a plugin's `pi.args`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PiArgProblem {
    /// Not of the form `--flag` or `--flag=value`.
    #[error("{0:?} is not --flag or --flag=value (letters, digits, '.', '_', '-')")]
    NotAFlag(String),
    /// One of pi's own options.
    #[error("{0} is one of pi's own options, not an extension flag")]
    PiOwnOption(String),
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
        if arg.starts_with('-') {
            let Some(name) = pi_flag_name(arg) else {
                problems.push((i, PiArgProblem::NotAFlag(arg.clone())));
                value_may_follow = false;
                continue;
            };
            let flag = format!("--{name}");
            if PI_OWN_OPTIONS.contains(&flag.as_str()) {
                problems.push((i, PiArgProblem::PiOwnOption(flag.clone())));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_string()).collect()
    }

    #[test]
    fn loader_families_are_stripped_case_insensitively() {
        for name in [
            "NODE_OPTIONS",
            "node_options",
            "NODE_PATH",
            "JITI_ALIAS",
            "JITI_FS_CACHE",
            "jiti_debug",
            "LD_PRELOAD",
            "LD_AUDIT",
            "BUN_OPTIONS",
            "PYTHONPATH",
            "PYTHONSTARTUP",
            "BASH_ENV",
            "ENV",
            "BASH_FUNC_echo%%",
            "GLIBC_TUNABLES",
            "OPENSSL_CONF",
            "CLAUDE_ENV_FILE",
            "GIT_SSH_COMMAND",
        ] {
            assert!(loader_denial(name).is_some(), "{name} must be stripped");
        }
        for name in [
            "PATH",
            "HOME",
            "LANG",
            "TERM",
            "ENVIRONMENT",
            "MY_NODE",
            "GREETING",
        ] {
            assert!(loader_denial(name).is_none(), "{name} must pass");
        }
    }

    #[test]
    fn plugin_env_rules_cover_exact_prefix_suffix_and_substring() {
        for name in [
            "PATH",
            "home",
            "OPENSSL_CONF",
            "NODE_ENV",
            "PI_OFFLINE",
            "GOOGLE_CLOUD_PROJECT",
            "HTTPS_PROXY",
            "https_proxy",
            "MY_API_KEY",
            "GH_TOKEN",
            "DB_SECRET_VALUE",
            "AWS_REGION",
            "LD_PRELOAD",
            "JITI_ALIAS",
        ] {
            assert!(plugin_env_denial(name).is_some(), "{name} must be refused");
        }
        for name in ["GREETING", "HELLO_LEVEL", "TOKENIZER", "SECRETARY"] {
            assert!(plugin_env_denial(name).is_none(), "{name} must be allowed");
        }
    }

    #[test]
    fn plugin_env_entry_checks_name_shape_and_value() {
        assert!(plugin_env_problems("GREETING", "hi").is_empty());
        assert_eq!(
            plugin_env_problems("greeting", "hi"),
            vec![EnvProblem::BadName("greeting".into())]
        );
        assert_eq!(
            plugin_env_problems("9X", "hi"),
            vec![EnvProblem::BadName("9X".into())]
        );
        assert_eq!(
            plugin_env_problems("X", "a\nb"),
            vec![EnvProblem::BadValue("X".into())]
        );
        assert_eq!(plugin_env_problems("X", "a\0b").len(), 1);
        assert_eq!(plugin_env_problems("X", "a\rb").len(), 1);
        let denied = plugin_env_problems("NODE_OPTIONS", "--require x");
        assert!(matches!(denied.as_slice(), [EnvProblem::Denied { .. }]));
        assert!(denied[0].to_string().contains("NODE_OPTIONS"));
    }

    #[test]
    fn sandbox_env_reserves_pins_and_loader_names() {
        for name in [
            "PATH",
            "HOME",
            "JITI_FS_CACHE",
            "PITCREW_X",
            "LD_PRELOAD",
            "NODE_OPTIONS",
        ] {
            assert!(sandbox_env_reserved(name).is_some(), "{name}");
        }
        assert!(sandbox_env_reserved("OPENAI_API_KEY").is_none());
        assert!(sandbox_env_problems("LANG", "C.UTF-8").is_empty());
    }

    #[test]
    fn pi_args_accept_flags_values_and_one_bare_word() {
        let args = strings(&["--greeting=Hello", "--loud", "--level", "3", "--quiet"]);
        assert!(pi_args_problems(&args, None).is_empty());
        let registered = strings(&["greeting", "loud", "level", "quiet"]);
        assert!(pi_args_problems(&args, Some(&registered)).is_empty());
    }

    #[test]
    fn pi_args_refuse_each_rule() {
        let check = |v: &[&str]| pi_args_problems(&strings(v), None);
        assert!(matches!(
            check(&["--model=x"])[0].1,
            PiArgProblem::PiOwnOption(_)
        ));
        assert!(matches!(
            check(&["--no-extensions"])[0].1,
            PiArgProblem::PiOwnOption(_)
        ));
        assert!(matches!(check(&["-e"])[0].1, PiArgProblem::NotAFlag(_)));
        assert!(matches!(check(&["---x"])[0].1, PiArgProblem::NotAFlag(_)));
        assert!(matches!(check(&["--"])[0].1, PiArgProblem::NotAFlag(_)));
        assert!(matches!(check(&["word"])[0].1, PiArgProblem::StrayWord(_)));
        assert!(matches!(
            check(&["--a", "b", "c"])[0],
            (2, PiArgProblem::StrayWord(_))
        ));
        assert!(matches!(
            check(&["--a=v", "b"])[0],
            (1, PiArgProblem::StrayWord(_))
        ));
        assert!(matches!(check(&["--a=-v"])[0].1, PiArgProblem::BadValue(_)));
        assert!(matches!(
            check(&["--a=@file"])[0].1,
            PiArgProblem::BadValue(_)
        ));
        assert!(matches!(
            check(&["--a", "@file"])[0].1,
            PiArgProblem::BadValue(_)
        ));
        assert!(matches!(
            check(&["--a=x\ny"])[0].1,
            PiArgProblem::ControlCharacter(_)
        ));
        // `--a -b`: pi reads `-b` as an option; it is refused as not a --flag.
        assert!(matches!(
            check(&["--a", "-b"])[0],
            (1, PiArgProblem::NotAFlag(_))
        ));
    }

    #[test]
    fn pi_args_must_name_registered_flags() {
        let registered = strings(&["greeting"]);
        let problems = pi_args_problems(&strings(&["--loud"]), Some(&registered));
        assert!(
            matches!(&problems[0].1, PiArgProblem::Unregistered { flag, .. } if flag == "--loud")
        );
        let none: Vec<String> = Vec::new();
        let problems = pi_args_problems(&strings(&["--loud"]), Some(&none));
        assert!(problems[0].1.to_string().contains("registered: none"));
    }
}
