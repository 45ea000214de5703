//! `pitcrew completions SHELL` and `pitcrew man --out DIR`: shell completions and man pages
//! generated from the same clap definitions the CLI parses with, so they cannot drift from it.

use anyhow::Context as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `pitcrew completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    pub shell: clap_complete::Shell,
}

/// Arguments of `pitcrew man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// The directory receiving `pitcrew.1` and one `pitcrew-<command>.1` per subcommand
    /// (created).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// Prints the completion script of `args.shell` for `pitcrew` on stdout.
pub fn completions(args: &CompletionsArgs) -> anyhow::Result<ExitCode> {
    let script = script(args.shell)?;
    crate::output::Stdout.write_all(script.as_bytes())?;
    crate::output::Stdout.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The completion script of `shell` for `pitcrew`: clap's, with the hooks that complete
/// sandbox ids and harness files ([`with_dynamic_hooks`]).
fn script(shell: clap_complete::Shell) -> anyhow::Result<String> {
    // Without the hidden subcommands (clap's scripts would offer them).
    let full = crate::cli_command();
    let mut cmd = clap::Command::new("pitcrew")
        .version(env!("CARGO_PKG_VERSION"))
        .args(full.get_arguments().cloned())
        .subcommands(full.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    let name = cmd.get_name().to_string();
    // Generated in memory: clap_complete panics on a write that fails.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut script);
    with_dynamic_hooks(shell, &String::from_utf8_lossy(&script))
}

/// The commands whose first argument is a sandbox id (aliases included).
const SANDBOX_COMMANDS: &str = "inspect cancel stop collect down rm logs";

/// The commands whose first argument is a harness file.
const HARNESS_COMMANDS: &str = "run validate lock";

/// Bash: after clap's own completion, the sandbox ids (`pitcrew __complete-sandboxes`, the
/// `--state-dir` and `--engine` typed on the line passed on) for a sandbox command's first
/// argument and the values of `--sandbox` and `--resume`, and `*.yaml`/`*.yml` files and
/// directories for a harness command's first argument. `@FLAGS@` is every option that takes no
/// value (the others' values are skipped when counting arguments).
const BASH_HOOK: &str = r#"
_pitcrew_dynamic() {
    _pitcrew "$@"
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" sub="" w i
    local -i positionals=0 value=0
    local -a engine=()
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${COMP_WORDS[i]}"
        if ((value)); then value=0; continue; fi
        case "$w" in
            --state-dir|--engine) engine+=("$w" "${COMP_WORDS[i+1]}"); value=1 ;;
            --sandbox|--resume) [[ "$sub" == batch ]] || value=1 ;;
            --*=*|@FLAGS@) ;;
            -*) value=1 ;;
            *) if [[ -z "$sub" ]]; then sub="$w"; else positionals+=1; fi ;;
        esac
    done
    [[ "$cur" == -* ]] && return 0
    if ((value)); then
        [[ "$prev" == --sandbox || "$prev" == --resume ]] || return 0
    elif ((positionals > 0)); then
        return 0
    fi
    if ((value)) || [[ " @SANDBOX@ " == *" $sub "* ]]; then
        COMPREPLY=( $(compgen -W "$("${COMP_WORDS[0]}" __complete-sandboxes "${engine[@]}" 2>/dev/null)" -- "$cur") )
    elif [[ " @HARNESS@ " == *" $sub "* ]]; then
        COMPREPLY=( $(compgen -d -- "$cur") $(compgen -f -X '!*.yaml' -- "$cur") $(compgen -f -X '!*.yml' -- "$cur") )
        compopt -o filenames 2>/dev/null
    fi
    return 0
}
"#;

/// Zsh: the function the sandbox arguments complete with.
const ZSH_HOOK: &str = r#"
(( $+functions[_pitcrew_sandboxes] )) ||
_pitcrew_sandboxes() {
    local -a ids
    ids=(${(f)"$(${words[1]} __complete-sandboxes 2>/dev/null)"})
    _describe -t sandboxes 'sandbox id' ids
}
"#;

/// Fish: the sandbox ids after a sandbox command.
const FISH_HOOK: &str = r#"
function __pitcrew_sandboxes
    set -l words (commandline -opc)
    $words[1] __complete-sandboxes 2>/dev/null
end
complete -c pitcrew -n "__fish_seen_subcommand_from @SANDBOX@" -f -a "(__pitcrew_sandboxes)"
"#;

/// Every spelling (`-f`, `--follow`) of an option of `cmd` or its subcommands that takes no
/// value, sorted.
fn flags(cmd: &clap::Command) -> Vec<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut stack = vec![cmd];
    while let Some(c) = stack.pop() {
        stack.extend(c.get_subcommands());
        for arg in c.get_arguments().filter(|a| !a.get_action().takes_values()) {
            out.extend(
                arg.get_short_and_visible_aliases()
                    .into_iter()
                    .flatten()
                    .map(|s| format!("-{s}")),
            );
            out.extend(
                arg.get_long_and_visible_aliases()
                    .into_iter()
                    .flatten()
                    .map(|l| format!("--{l}")),
            );
        }
    }
    // `-h` and `-V` are clap's own, and -vv is -v twice.
    out.extend(["-h", "--help", "-V", "--version", "-vv", "-vvv"].map(String::from));
    out.into_iter().collect()
}

/// `script` (clap's static completion for `shell`) with the hooks that complete sandbox ids
/// and harness files; an error when clap's output no longer has the shape they hook into (a
/// test catches that on an upgrade).
fn with_dynamic_hooks(shell: clap_complete::Shell, script: &str) -> anyhow::Result<String> {
    use clap_complete::Shell;
    let flags = flags(&crate::cli_command()).join("|");
    let fill = |hook: &str| {
        hook.replace("@SANDBOX@", SANDBOX_COMMANDS)
            .replace("@HARNESS@", HARNESS_COMMANDS)
            .replace("@FLAGS@", &flags)
    };
    let missing =
        |what: &str| anyhow::anyhow!("{shell} completion: {what} not found in clap's script");
    Ok(match shell {
        Shell::Bash => {
            let at = script
                .find("\nif [[ \"${BASH_VERSINFO[0]}\"")
                .ok_or_else(|| missing("the `complete` registration"))?;
            let tail =
                script[at..].replace("complete -F _pitcrew ", "complete -F _pitcrew_dynamic ");
            format!("{}{}{tail}", &script[..at], fill(BASH_HOOK))
        }
        Shell::Zsh => {
            let mut out = String::new();
            let mut hooked = 0;
            for line in script.lines() {
                let sandbox_arg = line.starts_with("':sandbox -- ")
                    || line.starts_with("'--sandbox=[")
                    || line.contains(")--resume=[");
                let line = if sandbox_arg && line.ends_with(":_default' \\") {
                    hooked += 1;
                    line.replace(":_default' \\", ":_pitcrew_sandboxes' \\")
                } else if line.starts_with("':harness -- ") && line.ends_with(":_files' \\") {
                    line.replace(":_files' \\", ":_files -g \"*.(yaml|yml)\"' \\")
                } else {
                    line.to_string()
                };
                out.push_str(&line);
                out.push('\n');
            }
            if hooked == 0 {
                return Err(missing("a sandbox argument"));
            }
            let at = out
                .find("\nif [ \"$funcstack[1]\" = \"_pitcrew\" ]")
                .ok_or_else(|| missing("the compdef registration"))?;
            format!("{}{}{}", &out[..at], ZSH_HOOK, &out[at..])
        }
        Shell::Fish => format!("{script}{}", fill(FISH_HOOK)),
        _ => script.to_string(),
    })
}

/// Writes the man pages of `pitcrew` into `args.out`, naming each file written.
pub fn man(args: &ManArgs) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("--out {}: create", args.out.display()))?;
    let cmd = crate::cli_command();
    let mut pages = vec![(cmd.get_name().to_string(), cmd.clone())];
    for sub in cmd
        .get_subcommands()
        .filter(|s| s.get_name() != "help" && !s.is_hide_set())
    {
        let name = format!("{}-{}", cmd.get_name(), sub.get_name());
        let invoked = format!("{} {}", cmd.get_name(), sub.get_name());
        pages.push((
            name.clone(),
            sub.clone().display_name(name).bin_name(invoked),
        ));
    }
    for (name, page) in pages {
        let path = args.out.join(format!("{name}.1"));
        let mut text = Vec::new();
        clap_mangen::Man::new(page)
            .title(name.clone())
            .render(&mut text)
            .with_context(|| format!("{name}: render the man page"))?;
        let text = with_exit_status(
            &String::from_utf8_lossy(&text),
            name.strip_prefix("pitcrew-").unwrap_or(""),
        );
        std::fs::write(&path, text).with_context(|| format!("{}: write", path.display()))?;
        crate::output::outln!("{}", path.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The codes an iteration exits with, from the supervisor's own constants (the table in
/// docs/troubleshooting.md, "Exit codes").
fn iteration_codes() -> Vec<(String, String)> {
    use pitcrew_core::exit_code::{self as code, meaning};
    let mut out = vec![(
        "0".to_string(),
        "the agent exited 0 and its own report shows no failure".to_string(),
    )];
    out.push((
        "1".into(),
        "the agent failed by its own account (it exited 1, or exited 0 with an error in its JSON stream), or pitcrew failed before a report"
            .into(),
    ));
    out.push(("2-92, 99-124".into(), "the agent's own exit code".into()));
    for c in [
        code::EDIT_REPAIR_DRIFT,
        code::SUB_AGENT_DRIFT,
        code::RUNTIME_MANIFEST_DRIFT,
        code::PLUGIN_DRIFT,
        code::HOOK_ADAPTER_DRIFT,
        code::CONFIG_DRIFT,
        code::SUPERVISOR_FAILED,
        code::AGENT_NOT_EXECUTABLE,
        code::AGENT_NOT_FOUND,
    ] {
        out.push((c.to_string(), meaning(c)));
    }
    out.push((
        "128+n".into(),
        "the agent was killed by signal n (137: SIGKILL, the timeout's grace, the memory limit or the disk budget; 143: SIGTERM, a cancel or a timeout)"
            .into(),
    ));
    out
}

/// The EXIT STATUS of `pitcrew COMMAND` (`""`: `pitcrew` itself): each code and its meaning.
pub fn exit_status(command: &str) -> Vec<(String, String)> {
    let failed = match command {
        "validate" => "the harness has problems, or it could not be read",
        "inspect" => "the live verification found drift, or the sandbox could not be reached",
        "cancel" => "nothing was running to cancel, or the sandbox could not be reached",
        "prune" => "a sandbox could not be taken down",
        "batch" => "a job did not succeed, or the batch could not start",
        _ => "the command failed: the error is on stderr (with --json also an error object on stdout)",
    };
    let mut out = match command {
        "run" | "" => iteration_codes(),
        _ => vec![
            ("0".to_string(), "success".to_string()),
            ("1".to_string(), failed.to_string()),
        ],
    };
    out.push((
        "2".into(),
        "the command line was refused (an unknown option, a bad value)".into(),
    ));
    if matches!(command, "run" | "batch" | "") {
        out.push((
            "130".into(),
            "interrupted (Ctrl-C, SIGTERM or SIGHUP): the running iteration was cancelled and collected, the sandbox stopped".into(),
        ));
    }
    out.push((
        "141".into(),
        "stdout or stderr was closed under it (a pipe whose reader exited); run and batch then end as on SIGTERM"
            .into(),
    ));
    out.sort_by_key(|(c, _)| {
        c.split(['-', '+', ','])
            .next()
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0)
    });
    out
}

/// `text` escaped for roff: backslashes doubled as `\e`, a leading `.` or `'` guarded.
fn roff_escape(text: &str) -> String {
    let text = text.replace('\\', "\\e");
    if text.starts_with(['.', '\'']) {
        format!("\\&{text}")
    } else {
        text
    }
}

/// A rendered man page with an EXIT STATUS section for `command`, before VERSION (or at its
/// end).
fn with_exit_status(page: &str, command: &str) -> String {
    let mut section = String::from(".SH \"EXIT STATUS\"\n");
    for (code, meaning) in exit_status(command) {
        section += &format!(
            ".TP\n\\fB{}\\fR\n{}\n",
            roff_escape(&code),
            roff_escape(&meaning)
        );
    }
    section += ".PP\nSee docs/troubleshooting.md, \"Exit codes\".\n";
    match page.find("\n.SH VERSION") {
        Some(at) => format!("{}\n{section}{}", &page[..at], &page[at + 1..]),
        None => format!("{page}{section}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap_complete::Shell;

    #[test]
    fn completions_generate_for_bash_zsh_and_fish_and_bash_parses_them() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut cmd = crate::cli_command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "pitcrew", &mut script);
            let script = String::from_utf8(script).unwrap();
            for sub in ["run", "prune", "collect", "resume", "lease"] {
                assert!(script.contains(sub), "{shell}: {sub} missing");
            }
            if shell == Shell::Bash {
                let dir = tempfile::tempdir().unwrap();
                let file = dir.path().join("pitcrew.bash");
                std::fs::write(&file, &script).unwrap();
                let status = std::process::Command::new("bash")
                    .arg("-n")
                    .arg(&file)
                    .status()
                    .unwrap();
                assert!(status.success(), "bash -n refused the script");
            }
        }
    }

    #[test]
    fn the_scripts_complete_sandbox_ids_and_harness_files_and_hide_the_helper() {
        let bash = script(Shell::Bash).unwrap();
        assert!(
            bash.contains("complete -F _pitcrew_dynamic -o nosort"),
            "{bash}"
        );
        assert!(bash.contains("__complete-sandboxes \"${engine[@]}\""));
        assert!(bash.contains(" inspect cancel stop collect down rm logs "));
        // The helper is called, never offered.
        assert_eq!(bash.matches("__complete-sandboxes").count(), 1);
        let zsh = script(Shell::Zsh).unwrap();
        let sandbox_args: Vec<&str> = zsh
            .lines()
            .filter(|l| l.starts_with("':sandbox -- "))
            .collect();
        // inspect, cancel, collect, down and logs (and their aliases).
        assert!(sandbox_args.len() >= 5, "{zsh}");
        assert!(sandbox_args
            .iter()
            .all(|l| l.ends_with(":_pitcrew_sandboxes' \\")));
        assert!(zsh.contains("--sandbox=[") && zsh.matches(":ID:_pitcrew_sandboxes'").count() == 2);
        assert!(zsh.contains(":_files -g \"*.(yaml|yml)\"'"), "{zsh}");
        assert!(zsh.contains("_pitcrew_sandboxes() {"));
        let fish = script(Shell::Fish).unwrap();
        assert!(
            fish.contains("__fish_seen_subcommand_from inspect cancel stop"),
            "{fish}"
        );
        assert!(!fish.contains("@SANDBOX@"));
    }

    #[test]
    fn a_man_page_is_written_for_pitcrew_and_each_subcommand() {
        let dir = tempfile::tempdir().unwrap();
        man(&ManArgs {
            out: dir.path().join("man1"),
        })
        .unwrap();
        for page in [
            "pitcrew.1",
            "pitcrew-run.1",
            "pitcrew-prune.1",
            "pitcrew-ps.1",
        ] {
            let text = std::fs::read_to_string(dir.path().join("man1").join(page)).unwrap();
            assert!(text.starts_with(".ie") || text.contains(".TH"), "{page}");
        }
        let run = std::fs::read_to_string(dir.path().join("man1/pitcrew-run.1")).unwrap();
        assert!(run.contains("pitcrew run"), "{run}");
        assert!(!dir.path().join("man1/pitcrew-help.1").exists());
    }

    #[test]
    fn every_man_page_has_an_exit_status_section_before_version() {
        let dir = tempfile::tempdir().unwrap();
        man(&ManArgs {
            out: dir.path().to_path_buf(),
        })
        .unwrap();
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let at = text.find(".SH \"EXIT STATUS\"");
            assert!(at.is_some(), "{}", path.display());
            if let Some(version) = text.find(".SH VERSION") {
                assert!(at < Some(version), "{}", path.display());
            }
            assert!(text.contains("\\fB141\\fR"), "{}", path.display());
        }
        let run = std::fs::read_to_string(dir.path().join("pitcrew-run.1")).unwrap();
        for code in ["96", "125", "127", "128+n", "130"] {
            assert!(run.contains(&format!("\\fB{code}\\fR")), "{code}: {run}");
        }
        assert!(run.contains("plugin or skills tree"), "{run}");
        let validate = std::fs::read_to_string(dir.path().join("pitcrew-validate.1")).unwrap();
        assert!(validate.contains("the harness has problems"), "{validate}");
        assert!(!validate.contains("\\fB130\\fR"), "{validate}");
    }
}
