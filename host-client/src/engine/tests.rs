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
        (
            &["--engine", "podman", "--allow-host-path", "/srv"][..],
            "--allow-host-path is for the kubernetes engine",
        ),
        (
            &["--engine", "kubernetes", "--allow-host-path", "/srv/../etc"][..],
            "--allow-host-path \"/srv/../etc\" has a `..` component",
        ),
        (
            &["--engine", "kubernetes", "--allow-host-path", "srv"][..],
            "--allow-host-path \"srv\" is not an absolute path",
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
    let kube = parsed(&[
        "--engine",
        "kubernetes",
        "--allow-host-path",
        "/srv/models",
        "--allow-host-path",
        "//data/./x/",
    ]);
    assert_eq!(kube.allow_host_path, ["/srv/models", "//data/./x/"]);
    assert!(kube.engine().is_ok());
}

#[test]
fn the_environment_names_the_engine_and_an_image_only_for_engines_that_take_one() {
    // nextest runs each test in a process of its own: these variables reach no other test.
    std::env::set_var("PITCREW_ENGINE", "docker");
    std::env::set_var("PITCREW_IMAGE", "localhost/pitcrew-pi:latest");
    assert_eq!(parsed(&[]).named().unwrap(), Some(EngineKind::Docker));
    // A command-line --engine wins, and the image variable is no error for the local engine.
    let local = parsed(&["--engine", "local"]);
    assert_eq!(local.named().unwrap(), Some(EngineKind::Local));
    assert!(local.engine().is_ok());
    // Given on the command line, --image still is.
    let err = parsed(&["--engine", "local", "--image", "x"])
        .engine()
        .err()
        .unwrap();
    assert!(err.to_string().contains("--image is for"), "{err}");
    // Set by the variable, the engine is named in the error of a local-engine option.
    let err = parsed(&["--state-dir", "/s"]).engine().err().unwrap();
    assert!(
        err.to_string()
            .contains("--state-dir is for the local engine (PITCREW_ENGINE"),
        "{err}"
    );
    std::env::set_var("PITCREW_ENGINE", "");
    assert_eq!(parsed(&[]).named().unwrap(), None);
    std::env::set_var("PITCREW_ENGINE", "vm");
    let err = parsed(&[]).named().err().unwrap();
    assert!(
        err.to_string()
            .contains("PITCREW_ENGINE=\"vm\" names no engine"),
        "{err}"
    );
    std::env::remove_var("PITCREW_ENGINE");
    std::env::remove_var("PITCREW_IMAGE");
}
