use super::*;
use clap::Parser as _;

/// `EngineArgs` parsed from `args` as a command line would give them.
fn parsed(args: &[&str]) -> EngineArgs {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        engine: EngineArgs,
    }
    Cli::parse_from(std::iter::once("pitcrew").chain(args.iter().copied())).engine
}

#[test]
fn an_option_the_chosen_engine_ignores_is_an_error() {
    for (args, said) in [
        (
            &["--engine", "podman", "--state-dir", "/s"][..],
            "--state-dir is for the local engine",
        ),
        (
            &["--engine", "docker", "--supervisor", "/x"][..],
            "--supervisor is for the local engine",
        ),
        (
            &["--engine", "local", "--exec-template", "x {sandbox}"][..],
            "--exec-template is for the exec engine",
        ),
        (
            &["--engine", "podman", "--sandbox-root", "/p"][..],
            "--sandbox-root is for the exec engine",
        ),
        (&["--engine", "local", "--image", "i"][..], "--image is for"),
        (
            &["--engine", "exec", "--namespace", "n"][..],
            "--namespace is for the kubernetes engine",
        ),
    ] {
        let err = parsed(args)
            .engine()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains(said), "{args:?}: {err}");
    }
    let exec = parsed(&["--engine", "exec", "--exec-template", "ssh h {sandbox}"]);
    assert!(exec.engine().is_ok());
}
