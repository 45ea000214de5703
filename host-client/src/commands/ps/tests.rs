use super::view::*;
use crate::engine::SandboxEntry;

fn entry(id: &str, engine: &str, detail: serde_json::Value) -> SandboxEntry {
    SandboxEntry {
        id: id.into(),
        engine: engine.into(),
        running: true,
        state: "in-run".into(),
        detail,
    }
}

/// Two sandboxes: a local one created at 1_796_000_000 holding a run, and a podman one.
fn two() -> [SandboxEntry; 2] {
    [
        entry(
            "pc-1",
            "local",
            serde_json::json!({"created": 1_796_000_000u64, "iteration": 3,
                "claim": {"run": "r-7", "state": "held",
                    "plan": {"harness": "/h/harness.yaml"}}}),
        ),
        entry(
            "pc-22222",
            "podman",
            serde_json::json!({"created": "2026-12-01T12:34:56.789Z",
                "image": "localhost/pitcrew-pi:1",
                "state_detail": "note\u{1b}[31m"}),
        ),
    ]
}

#[test]
fn the_default_table_has_a_header_aligned_columns_an_image_and_relative_times() {
    let list = two();
    let now = 1_796_000_000 + 3 * 60 + 5;
    let out = Template::parse(DEFAULT_TABLE).unwrap().render(&list, now);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].starts_with("ID        ENGINE  STATE   ITERATION  CREATED"),
        "{out}"
    );
    assert!(lines[0].contains("  IMAGE  "), "{out}");
    let col = |l: &str, w: &str| l.find(w);
    assert_eq!(
        col(lines[0], "IMAGE"),
        col(lines[2], "localhost/pitcrew-pi:1")
    );
    assert_eq!(col(lines[0], "ENGINE"), col(lines[1], "local"));
    assert!(lines[1].contains("3 minutes ago"), "{out}");
    assert!(lines[1].contains("/h/harness.yaml"), "{out}");
    // The local sandbox has no image; the podman one was created after `now`: never negative.
    assert!(lines[1].contains("  -  "), "{out}");
    assert!(lines[2].contains("Less than a second ago"), "{out}");
    assert!(!out.contains('\u{1b}'), "{out}");
}

#[test]
fn timestamps_of_every_engine_parse_to_the_same_second() {
    let t = 1_796_000_000;
    for text in [
        "2026-11-30T00:53:20Z",
        "2026-11-30T00:53:20.123456789Z",
        "2026-11-30T01:53:20+01:00",
        "2026-11-29 23:53:20.5 -0100 -0100",
        "2026-11-30 00:53:20.000000001 +0000 UTC",
    ] {
        assert_eq!(parse_timestamp(text), Some(t), "{text}");
    }
    assert_eq!(rfc3339(t), "2026-11-30T00:53:20Z");
    for bad in [
        "",
        "yesterday",
        "2026-13-01T00:00:00Z",
        "2026-11-30X00:53:20",
    ] {
        assert_eq!(parse_timestamp(bad), None, "{bad}");
    }
}

#[test]
fn ago_reads_like_podman() {
    let now = 10_000_000_000;
    for (secs, said) in [
        (0, "Less than a second ago"),
        (1, "1 second ago"),
        (45, "45 seconds ago"),
        (90, "About a minute ago"),
        (3 * 60, "3 minutes ago"),
        (2 * 3600, "2 hours ago"),
        (86_400, "1 day ago"),
        (3 * 604_800, "3 weeks ago"),
        (4 * 2_592_000, "4 months ago"),
        (2 * 31_536_000, "2 years ago"),
    ] {
        assert_eq!(ago(now - secs, now), said, "{secs}");
    }
    assert_eq!(ago(now + 5, now), "Less than a second ago");
}

#[test]
fn a_template_substitutes_fields_and_refuses_unknown_ones_naming_the_valid() {
    let list = two();
    let now = 1_796_000_000;
    let t = Template::parse("{{.ID}}\\t{{ .Image }} {{.Run}}").unwrap();
    assert_eq!(
        t.render(&list, now),
        "pc-1\t- r-7\npc-22222\tlocalhost/pitcrew-pi:1 -\n"
    );
    let t = Template::parse("table {{.ID}}\\t{{.CreatedAt}}").unwrap();
    assert_eq!(
        t.render(&list, now),
        "ID        CREATED AT\npc-1      2026-11-30T00:53:20Z\npc-22222  2026-12-01T12:34:56Z\n"
    );
    let err = Template::parse("{{.Bogus}}").unwrap_err().to_string();
    assert!(err.contains(".Bogus"), "{err}");
    assert!(
        err.contains("{{.Image}}") && err.contains("{{.CreatedAt}}"),
        "{err}"
    );
    let err = Template::parse("{{json .}}").unwrap_err().to_string();
    assert!(err.contains("not a field"), "{err}");
    assert!(Template::parse("{{.ID").is_err());
}

#[test]
fn filters_match_like_podman_ps() {
    let list = two();
    let ids = |f: &[&str]| -> Vec<String> {
        let f: Vec<String> = f.iter().map(|s| s.to_string()).collect();
        let f = Filters::parse(&f).unwrap();
        list.iter()
            .filter(|s| f.matches(s))
            .map(|s| s.id.clone())
            .collect()
    };
    assert_eq!(ids(&[]), ["pc-1", "pc-22222"]);
    assert_eq!(ids(&["id=pc-2"]), ["pc-22222"]);
    assert_eq!(ids(&["engine=local"]), ["pc-1"]);
    assert_eq!(
        ids(&["engine=local", "engine=podman"]),
        ["pc-1", "pc-22222"]
    );
    assert_eq!(ids(&["engine=local", "id=pc-2"]), Vec::<String>::new());
    assert_eq!(ids(&["image=pitcrew-pi"]), ["pc-22222"]);
    assert_eq!(ids(&["harness=harness.yaml"]), ["pc-1"]);
    assert_eq!(ids(&["run=r-7"]), ["pc-1"]);
    assert_eq!(ids(&["state=running"]), ["pc-1", "pc-22222"]);
    assert_eq!(ids(&["status=in-run"]), ["pc-1", "pc-22222"]);
    assert_eq!(ids(&["state=kept"]), Vec::<String>::new());
    let err = Filters::parse(&["colour=red".into()])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("\"colour\"") && err.contains("engine"),
        "{err}"
    );
    assert!(Filters::parse(&["id".into()]).is_err());
}

#[test]
fn json_carries_the_image_and_the_absolute_creation_time() {
    let list = two();
    let v = json(&list[1]);
    assert_eq!(v["image"], "localhost/pitcrew-pi:1");
    assert_eq!(v["created_at"], "2026-12-01T12:34:56Z");
    assert_eq!(v["detail"]["created"], "2026-12-01T12:34:56.789Z");
    assert_eq!(json(&list[0])["image"], serde_json::Value::Null);
}
