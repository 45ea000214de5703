use super::*;

fn spec() -> SandboxSpec {
    SandboxSpec {
        existing: None,
        pass_env: vec!["ANTHROPIC_API_KEY".into()],
        placeholders: Vec::new(),
        memory_bytes: 1 << 30,
        processes: 100,
        upload_limits: Default::default(),
        private_network: false,
    }
}

#[test]
fn a_harnesss_upload_limits_follow_the_image_as_serve_options() {
    let engine = ContainerEngine::new(Cli::Podman, Some("img".into()), None);
    let id = SandboxId("pc-1".into());
    let args = engine.run_args(&id, "img", &spec());
    assert_eq!(args.last().map(String::as_str), Some("img"), "{args:?}");
    let mut big = spec();
    big.upload_limits.max_entries = 2_000_000;
    let args = engine.run_args(&id, "img", &big);
    let at = args.iter().position(|a| a == "img").unwrap();
    assert_eq!(
        args[at + 1..],
        [
            "serve",
            "--upload-max-entries",
            "2000000",
            "--upload-max-bytes",
            &(4u64 << 30).to_string()
        ]
    );
}

#[test]
fn a_new_container_is_confined_labelled_and_limited() {
    let e = ContainerEngine::new(Cli::Podman, None, None);
    let id = SandboxId("pc-0011aabb".into());
    let args = e.run_args(&id, "localhost/pitcrew-pi:0.1.0", &spec());
    let joined = args.join(" ");
    for want in [
        "run --detach --name pc-0011aabb",
        "--label pitcrew.sandbox=pc-0011aabb",
        "--label pitcrew.engine=podman",
        "--label pitcrew.root=/pitcrew",
        "--security-opt no-new-privileges --cap-drop ALL",
        "--network=none",
        "--pids-limit=164",
        "--memory=1342177280 --memory-swap=1342177280",
        "--read-only",
        "--volume /pitcrew --volume /var/lib/pitcrew",
        "--env ANTHROPIC_API_KEY",
        "--sysctl=kernel.shmmax=1073741824 --sysctl=kernel.shmall=262144 --sysctl=kernel.shm_rmid_forced=1",
        "--pull=never",
    ] {
        assert!(joined.contains(want), "{want:?} not in {joined}");
    }
    let added: Vec<&str> = args
        .windows(2)
        .filter(|w| w[0] == "--cap-add")
        .map(|w| w[1].as_str())
        .collect();
    assert_eq!(added, CAPABILITIES);
    // The image comes last: nothing after it is taken as the entrypoint's arguments.
    assert_eq!(args.last().unwrap(), "localhost/pitcrew-pi:0.1.0");

    let on_host = ContainerEngine::new(Cli::Docker, None, Some("host".into()));
    assert!(on_host
        .run_args(&id, "i", &spec())
        .contains(&"--network=host".to_string()));
}

#[test]
fn inspect_output_of_both_clis_reads_the_same() {
    // docker names carry a leading slash and no ImageName; podman has both fields.
    let docker = serde_json::json!({
        "Id": "abc", "Name": "/pc-1", "Created": "2026-12-01T00:00:00Z",
        "State": {"Status": "running", "Running": true},
        "Config": {"Image": "img:1", "Labels": {"pitcrew.sandbox": "pc-1", "pitcrew.root": "/pitcrew"}}
    });
    let c = Container::from_inspect(&docker).unwrap();
    assert_eq!(c.name, "pc-1");
    assert_eq!(c.image, "img:1");
    assert!(c.running);
    assert!(c.created_by_pitcrew(&SandboxId("pc-1".into())));
    assert!(!c.created_by_pitcrew(&SandboxId("pc-2".into())));

    let foreign = serde_json::json!({
        "Id": "def", "Name": "mybox", "ImageName": "localhost/x:1",
        "State": {"Status": "exited", "Running": false},
        "Config": {"Image": "x", "Labels": null}
    });
    let c = Container::from_inspect(&foreign).unwrap();
    assert_eq!(c.image, "localhost/x:1");
    assert!(!c.running);
    assert_eq!(c.sandbox_label, None);
    assert!(!c.created_by_pitcrew(&SandboxId("mybox".into())));
}

#[test]
fn a_container_stays_when_its_supervisor_dies_and_its_records_are_on_its_state_volume() {
    let e = ContainerEngine::new(Cli::Docker, None, None);
    let args = e.run_args(&SandboxId("pc-1".into()), "i", &spec());
    // Never `--rm`: a stopped container keeps its records until `down` removes it.
    assert!(
        !args.iter().any(|a| a == "--rm" || a.starts_with("--rm=")),
        "{args:?}"
    );
    assert!(
        RECORDS.starts_with(&format!("{STATE}/")),
        "{RECORDS} is not on the {STATE} volume"
    );
}

#[test]
fn an_exited_container_says_how_its_supervisor_ended() {
    let state = |status: &str, running: bool, code: i64, oom: bool| {
        Container::from_inspect(&serde_json::json!({
            "Id": "abc", "Name": "pc-1",
            "State": {"Status": status, "Running": running, "ExitCode": code, "OOMKilled": oom},
            "Config": {"Labels": {"pitcrew.sandbox": "pc-1"}}
        }))
        .unwrap()
    };
    let killed = state("exited", false, 137, false);
    assert!(killed.exited());
    assert_eq!(
        killed.exit_summary(),
        "exited with code 137, killed by SIGKILL"
    );
    let described = describe(Cli::Podman, &killed);
    assert_eq!(described["exit_code"], 137);
    assert_eq!(
        described["state_detail"],
        "its supervisor exited with code 137, killed by SIGKILL"
    );
    let oom = state("exited", false, 137, true);
    assert!(oom
        .exit_summary()
        .ends_with(", OOM-killed (the container's memory limit)"));
    assert_eq!(
        state("dead", false, 139, false).exit_summary(),
        "dead with code 139, killed by SIGSEGV"
    );
    assert_eq!(
        state("exited", false, 125, false).exit_summary(),
        "exited with code 125"
    );
    // Running, paused or never started: its supervisor is not known to be gone.
    for (status, running) in [("running", true), ("paused", false), ("created", false)] {
        let c = state(status, running, 0, false);
        assert!(!c.exited(), "{status}");
        assert!(describe(Cli::Docker, &c).get("state_detail").is_none());
    }
}

#[test]
fn the_supervisor_log_is_quoted_without_colours() {
    assert_eq!(
        stored::without_colours(
            "\u{1b}[2m2026-12-01T12:23:25Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m iteration 1: exit 0"
        ),
        "2026-12-01T12:23:25Z  INFO iteration 1: exit 0"
    );
    // A lone escape is not a colour: it stays for the caller's escaping.
    assert_eq!(stored::without_colours("a\u{1b}b"), "a\u{1b}b");
}

#[test]
fn podman_gets_this_processs_own_limits_and_docker_none() {
    let limits = HostLimits {
        nofile: Some(20000),
        nproc: Some(96362),
        pid_max: Some(32768),
    };
    // nproc is bounded by pid_max (podman lowers its own to it), nofile is the hard limit.
    assert_eq!(
        podman_ulimits(&limits),
        [
            "--ulimit",
            "nofile=20000:20000",
            "--ulimit",
            "nproc=32768:32768"
        ]
    );
    let unlimited = HostLimits {
        nofile: Some(1 << 20),
        nproc: None,
        pid_max: Some(4194304),
    };
    assert_eq!(
        podman_ulimits(&unlimited),
        [
            "--ulimit",
            "nofile=1048576:1048576",
            "--ulimit",
            "nproc=4194304:4194304"
        ]
    );
    let lower = HostLimits {
        nofile: None,
        nproc: Some(1000),
        pid_max: Some(32768),
    };
    assert_eq!(podman_ulimits(&lower), ["--ulimit", "nproc=1000:1000"]);

    let id = SandboxId("pc-1".into());
    let podman = ContainerEngine::new(Cli::Podman, None, None).run_args(&id, "i", &spec());
    assert_eq!(
        podman.iter().filter(|a| *a == "--ulimit").count(),
        2,
        "{podman:?}"
    );
    let docker = ContainerEngine::new(Cli::Docker, None, None).run_args(&id, "i", &spec());
    assert!(!docker.iter().any(|a| a == "--ulimit"), "{docker:?}");
}

#[test]
fn a_runtime_that_cannot_set_a_limit_gets_the_setting_that_gets_past_it() {
    let err = "podman run: Error: runc: runc create failed: unable to start container process: \
               error during container init: error setting rlimits for ready process: error \
               setting rlimit type 7: operation not permitted: OCI permission denied";
    let hint = rlimit_hint(Cli::Podman, err).unwrap();
    assert!(hint.contains("default_ulimits = []"), "{hint}");
    assert!(hint.contains("CONTAINERS_CONF"), "{hint}");
    assert!(rlimit_hint(Cli::Docker, err).is_none());
    assert!(rlimit_hint(Cli::Podman, "no such image").is_none());
}

#[test]
fn a_model_credential_goes_to_a_container_as_its_placeholder() {
    let engine = ContainerEngine::new(Cli::Podman, Some("img".into()), None);
    let mut spec = spec();
    spec.placeholders = spec.pass_env.clone();
    let args = engine.run_args(&SandboxId("pc-1".into()), "img", &spec);
    assert!(
        args.iter()
            .any(|a| a == "ANTHROPIC_API_KEY=pitcrew-placeholder-ANTHROPIC_API_KEY"),
        "{args:?}"
    );
    assert!(!args.iter().any(|a| a == "ANTHROPIC_API_KEY"), "{args:?}");
}
