use super::*;

fn spec() -> SandboxSpec {
    SandboxSpec {
        existing: None,
        pass_env: vec!["ANTHROPIC_API_KEY".into()],
        memory_bytes: 1 << 30,
        processes: 100,
    }
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
