//! Unit tests of `protocol`.

use super::*;

#[test]
fn frames_round_trip_through_both_decoders() {
    let frames = vec![
        Frame::control(&Request::Run {
            id: 7,
            feedback: None,
        }),
        Frame::data(Channel::Stdout, b"hello\n".to_vec()),
        Frame::data(Channel::Tar, Vec::new()),
    ];
    let mut bytes = Vec::new();
    for f in &frames {
        write_frame(&mut bytes, f).unwrap();
    }
    let mut cursor = &bytes[..];
    for f in &frames {
        assert_eq!(read_frame(&mut cursor).unwrap().as_ref(), Some(f));
    }
    assert!(read_frame(&mut cursor).unwrap().is_none());

    let mut dec = FrameDecoder::new();
    let mut out = Vec::new();
    for b in &bytes {
        dec.push(std::slice::from_ref(b));
        while let Some(f) = dec.next_frame().unwrap() {
            out.push(f);
        }
    }
    assert_eq!(out, frames);
    assert_eq!(dec.pending(), 0);
    assert_eq!(
        out[0].json::<Request>().unwrap(),
        Request::Run {
            id: 7,
            feedback: None
        }
    );
}

/// Feeds `bytes` to `dec` in 64 KiB reads, as a connection does.
fn push_in_reads(dec: &mut FrameDecoder, bytes: &[u8]) {
    for chunk in bytes.chunks(64 * 1024) {
        dec.push(chunk);
    }
}

#[test]
fn a_large_frame_does_not_leave_its_buffer_behind() {
    let big = Frame::control(&"a listing ".repeat(200_000));
    let small = Frame::data(Channel::Tar, vec![1; 10]);
    let mut bytes = big.encode();
    bytes.extend_from_slice(&small.encode()[..8]);
    let mut dec = FrameDecoder::new();
    push_in_reads(&mut dec, &bytes);
    assert_eq!(dec.next_frame().unwrap(), Some(big));
    assert!(
        dec.buf.capacity() <= FrameDecoder::LARGE_CAPACITY,
        "{}",
        dec.buf.capacity()
    );
    // What followed the large frame is still there.
    dec.push(&small.encode()[8..]);
    assert_eq!(dec.next_frame().unwrap(), Some(small));
    assert_eq!(dec.pending(), 0);

    // A control frame under a data frame's size (a smaller listing part) is let go of too.
    let part = Frame::control(&"a listing ".repeat(60_000));
    push_in_reads(&mut dec, &part.encode());
    assert_eq!(dec.next_frame().unwrap(), Some(part));
    assert!(
        dec.buf.capacity() <= FrameDecoder::LARGE_CAPACITY,
        "{}",
        dec.buf.capacity()
    );
}

#[test]
fn a_stream_of_large_data_frames_leaves_its_buffer_behind_at_its_end() {
    // An upload's tar stream in data frames of 256 KiB, read 64 KiB at a time: the buffer grows
    // past a frame while the stream lasts and is let go of at the empty frame that ends it,
    // even when no large control frame follows (a re-run naming held listings sends none).
    let frame = Frame::data(Channel::Tar, vec![7; 256 * 1024]);
    let mut bytes = Vec::new();
    for _ in 0..4 {
        bytes.extend_from_slice(&frame.encode());
    }
    let mut dec = FrameDecoder::new();
    let mut frames = 0;
    for chunk in bytes.chunks(64 * 1024 + 5) {
        dec.push(chunk);
        while let Some(f) = dec.next_frame().unwrap() {
            assert_eq!(f, frame);
            frames += 1;
        }
    }
    assert_eq!(frames, 4);
    assert!(dec.buf.capacity() > FrameDecoder::LARGE_CAPACITY);
    let end = Frame::data(Channel::Tar, Vec::new());
    let next = Frame::control(&Request::Run {
        id: 9,
        feedback: None,
    });
    let mut tail = end.encode();
    tail.extend_from_slice(&next.encode());
    dec.push(&tail);
    assert_eq!(dec.next_frame().unwrap(), Some(end));
    assert!(
        dec.buf.capacity() <= FrameDecoder::LARGE_CAPACITY,
        "{}",
        dec.buf.capacity()
    );
    // What followed the end of the stream is still there.
    assert_eq!(dec.next_frame().unwrap(), Some(next));
    assert_eq!(dec.pending(), 0);
}

#[test]
fn bad_headers_oversize_and_truncation_are_errors() {
    let mut dec = FrameDecoder::new();
    dec.push(&[9, 0, 0, 0, 0, 0]);
    assert!(matches!(dec.next_frame(), Err(FrameError::UnknownKind(9))));

    let mut dec = FrameDecoder::new();
    dec.push(&[1, 3, 0, 0, 0, 0]);
    assert!(matches!(dec.next_frame(), Err(FrameError::BadChannel(3))));

    let mut dec = FrameDecoder::new();
    dec.push(&[2, 1, 0xff, 0xff, 0xff, 0xff]);
    let err = dec.next_frame().unwrap_err();
    assert!(matches!(
        err,
        FrameError::Oversized {
            limit: MAX_PAYLOAD,
            ..
        }
    ));
    assert!(!err.stream_usable());

    let mut dec = FrameDecoder::new();
    dec.push(&[1, 0, 0xff, 0xff, 0xff, 0xff]);
    assert!(matches!(
        dec.next_frame(),
        Err(FrameError::Oversized {
            limit: MAX_CONTROL_PAYLOAD,
            ..
        })
    ));
    let mut sink = Vec::new();
    let big = Frame::data(Channel::Tar, vec![0; MAX_PAYLOAD + 1]);
    assert!(write_frame(&mut sink, &big).is_err());
    assert!(sink.is_empty(), "nothing is written for an oversized frame");

    let bytes = Frame::data(Channel::Stdout, vec![1; 10]).encode();
    let mut cursor = &bytes[..8];
    assert!(matches!(
        read_frame(&mut cursor),
        Err(FrameError::Truncated { got: 2, want: 10 })
    ));
    let mut cursor = &bytes[..3];
    assert!(matches!(
        read_frame(&mut cursor),
        Err(FrameError::Truncated { .. })
    ));
}

#[test]
fn unknown_or_malformed_messages_do_not_parse() {
    let f = Frame {
        kind: FrameKind::Control,
        channel: Channel::Control,
        payload: br#"{"type":"launch_missiles","id":1}"#.to_vec(),
    };
    let err = f.json::<Request>().unwrap_err();
    assert!(err.stream_usable());
    let f = Frame {
        kind: FrameKind::Control,
        channel: Channel::Control,
        payload: b"{not json".to_vec(),
    };
    assert!(f.json::<Request>().is_err());
    let f = Frame::data(Channel::Stdout, b"{}".to_vec());
    assert!(matches!(f.json::<Request>(), Err(FrameError::NotControl)));
}

#[test]
fn the_end_is_kept_at_a_character_boundary() {
    let mut t = "abcdef".to_string();
    assert_eq!(keep_end(&mut t, 10), 0);
    assert_eq!(keep_end(&mut t, 4), 2);
    assert_eq!(t, "cdef");
    // "é" is two bytes: a cut inside it drops it whole.
    let mut t = "aébc".to_string();
    assert_eq!(keep_end(&mut t, 3), 3);
    assert_eq!(t, "bc");
}

#[test]
fn error_kinds_have_their_wire_names_and_unknown_ones_still_read() {
    let names: Vec<String> = ErrorKind::KNOWN
        .iter()
        .map(|k| serde_json::to_string(k).unwrap())
        .collect();
    assert_eq!(
        names,
        [
            r#""malformed""#,
            r#""version""#,
            r#""order""#,
            r#""busy""#,
            r#""refused""#,
            r#""not-found""#,
            r#""internal""#,
            r#""stopped""#,
        ]
    );
    for kind in ErrorKind::KNOWN {
        let wire = serde_json::to_string(&kind).unwrap();
        assert_eq!(serde_json::from_str::<ErrorKind>(&wire).unwrap(), kind);
    }
    // A newer supervisor's kind: the reply still parses, and the kind goes back as it came.
    let newer: Response =
        serde_json::from_str(r#"{"type":"error","id":4,"kind":"teapot","message":"m"}"#).unwrap();
    let Response::Error { kind, .. } = &newer else {
        panic!("{newer:?}")
    };
    assert_eq!(kind, &ErrorKind::Other("teapot".into()));
    assert_eq!(
        serde_json::to_string(&newer).unwrap(),
        r#"{"type":"error","id":4,"kind":"teapot","message":"m"}"#
    );
}

#[test]
fn steps_and_states_have_their_wire_names_and_unknown_ones_still_read() {
    let steps: Vec<&str> = Step::KNOWN.iter().map(Step::as_str).collect();
    assert_eq!(
        steps,
        [
            "reap",
            "own-state",
            "ipc-sweep",
            "agent-dirs",
            "config-reset",
            "home-reset",
            "tmp-reset",
            "output-reset",
            "verify",
            "workspace-config",
            "claude-skills",
            "claude-settings",
            "context-files",
            "environment",
            "launch",
            "agent",
            "output",
            "final-reap",
            "record",
        ]
    );
    let states: Vec<&str> = StepState::KNOWN.iter().map(StepState::as_str).collect();
    assert_eq!(states, ["started", "finished", "restored", "truncated"]);
    for step in Step::KNOWN {
        let wire = serde_json::to_string(step).unwrap();
        assert_eq!(wire, format!("\"{}\"", step.as_str()));
        assert_eq!(&serde_json::from_str::<Step>(&wire).unwrap(), step);
    }
    for state in StepState::KNOWN {
        let wire = serde_json::to_string(state).unwrap();
        assert_eq!(&serde_json::from_str::<StepState>(&wire).unwrap(), state);
    }
    let newer =
        r#"{"type":"event","id":4,"iteration":1,"step":"warp","state":"engaged","detail":{"x":1}}"#;
    let event: Response = serde_json::from_str(newer).unwrap();
    let Response::Event { step, state, .. } = &event else {
        panic!("{event:?}")
    };
    assert_eq!(
        (step, state),
        (
            &Step::Other("warp".into()),
            &StepState::Other("engaged".into())
        )
    );
    assert_eq!(serde_json::to_string(&event).unwrap(), newer);
}

/// The JSON of a reply as `docs/protocol.md` shows it: the bytes of `typed` are the documented
/// line's, which must be in the document.
fn documented(typed: &Response, line: &str) {
    const DOC: &str = include_str!("../../../docs/protocol.md");
    assert!(DOC.contains(line), "not in docs/protocol.md: {line}");
    assert_eq!(serde_json::to_string(typed).unwrap(), line);
    assert_eq!(&serde_json::from_str::<Response>(line).unwrap(), typed);
}

/// An `ok` whose detail reads back as `reply`.
fn ok_reply<T: OkReply + PartialEq + std::fmt::Debug>(id: u64, reply: T) -> Response {
    let response = Response::ok(id, &reply);
    let Response::Ok { detail, .. } = &response else {
        unreachable!()
    };
    assert_eq!(detail.read::<T>().unwrap(), reply);
    response
}

#[test]
fn every_reply_keeps_its_documented_wire_form() {
    use detail::*;
    documented(
        &Response::Error {
            id: 3,
            kind: ErrorKind::Order,
            message: "run needs a manifest: send set_manifest first".into(),
        },
        r#"{"type":"error","id":3,"kind":"order","message":"run needs a manifest: send set_manifest first"}"#,
    );
    // Keys in sorted order: as the supervisor wrote them when it built details as JSON values.
    let sorted = |line: &str| {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        let detail = serde_json::to_string(&value["detail"]).unwrap();
        let head = line.split(r#""detail":"#).next().unwrap();
        format!("{head}\"detail\":{detail}}}")
    };
    for (typed, line) in [
        (
            ok_reply(3, ManifestSet { files: 3, trees: 2 }),
            r#"{"type":"ok","id":3,"detail":{"trees":2,"files":3}}"#,
        ),
        (
            ok_reply(
                4,
                ListingAdded {
                    complete: false,
                    dirs: 1,
                    files: 1,
                    held: false,
                    tree: "plugin-a".into(),
                },
            ),
            r#"{"type":"ok","id":4,"detail":{"tree":"plugin-a","files":1,"dirs":1,"complete":false}}"#,
        ),
        (
            ok_reply(
                2,
                Uploaded {
                    dest: Some("/opt/pitcrew/plugins/fmt".into()),
                    duration_ms: Some(8),
                    counts: serde_json::from_str(r#"{"files":12,"dirs":3,"bytes":40960}"#).unwrap(),
                },
            ),
            r#"{"type":"ok","id":2,"detail":{"dest":"/opt/pitcrew/plugins/fmt","files":12,"dirs":3,"bytes":40960,"duration_ms":8}}"#,
        ),
        (
            ok_reply(
                5,
                Signalled {
                    delivered: true,
                    signal: "SIGINT".into(),
                },
            ),
            r#"{"type":"ok","id":5,"detail":{"delivered":true,"signal":"SIGINT"}}"#,
        ),
        (
            ok_reply(
                6,
                Cancelled {
                    cancelled: true,
                    run_stopped: false,
                },
            ),
            r#"{"type":"ok","id":6,"detail":{"cancelled":true,"run_stopped":false}}"#,
        ),
        (
            ok_reply(
                7,
                CollectSent {
                    bytes: 10240,
                    iteration: 1,
                },
            ),
            r#"{"type":"ok","id":7,"detail":{"iteration":1,"bytes":10240}}"#,
        ),
        (
            ok_reply(13, Renewed { lease_ms: 60000 }),
            r#"{"type":"ok","id":13,"detail":{"lease_ms":60000}}"#,
        ),
        (ok_reply(11, ()), r#"{"type":"ok","id":11,"detail":null}"#),
        (
            ok_reply(12, CollectedAck { collected: 2 }),
            r#"{"type":"ok","id":12,"detail":{"collected":2}}"#,
        ),
        (
            ok_reply(9, ShutDown { stopped: true }),
            r#"{"type":"ok","id":9,"detail":{"stopped":true}}"#,
        ),
        (
            Response::Event {
                id: 4,
                iteration: 1,
                step: Step::Reap,
                state: StepState::Finished,
                detail: EventDetail::of(&events::Reaped {
                    killed: 0,
                    remaining: 0,
                }),
            },
            r#"{"type":"event","id":4,"iteration":1,"step":"reap","state":"finished","detail":{"killed":0,"remaining":0}}"#,
        ),
    ] {
        const DOC: &str = include_str!("../../../docs/protocol.md");
        assert!(DOC.contains(line), "not in docs/protocol.md: {line}");
        assert_eq!(serde_json::to_string(&typed).unwrap(), sorted(line));
        assert_eq!(serde_json::from_str::<Response>(line).unwrap(), typed);
    }
}

/// The claim of the documented `claim` answer.
fn documented_claim() -> status::ClaimStatus {
    status::ClaimStatus {
        iterations: Vec::new(),
        lease_ms: 60000,
        orphaned_at: None,
        orphaned_because: None,
        plan: Some(ClaimPlan {
            harness: Some("/home/me/harness.yaml".into()),
            iterations: Some(3),
            keep: Some(false),
            records: None,
            other: Default::default(),
        }),
        ready: false,
        run: "20261201T111801Z-pc-5a278ba5".into(),
        since: 1796000000,
        silent_ms: Some(0),
        state: status::ClaimState::Held,
        stopped: false,
    }
}

#[test]
fn the_claim_and_the_status_document_keep_their_documented_wire_form() {
    let claim = ok_reply(
        10,
        detail::Claimed {
            claim: documented_claim(),
            held_listings: Some(
                [(
                    "/work/repo".to_string(),
                    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".to_string(),
                )]
                .into(),
            ),
        },
    );
    documented(
        &claim,
        r#"{"type":"ok","id":10,"detail":{"claim":{"iterations":[],"lease_ms":60000,"orphaned_at":null,"orphaned_because":null,"plan":{"harness":"/home/me/harness.yaml","iterations":3,"keep":false,"records":null},"ready":false,"run":"20261201T111801Z-pc-5a278ba5","silent_ms":0,"since":1796000000,"state":"held","stopped":false},"held_listings":{"/work/repo":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}}}"#,
    );
    let request = Request::Claim {
        id: 10,
        run: "20261201T111801Z-pc-5a278ba5".into(),
        plan: documented_claim().plan,
        lease_ms: Some(60000),
        tunnel: false,
    };
    let line = r#"{"type":"claim","id":10,"run":"20261201T111801Z-pc-5a278ba5","plan":{"harness":"/home/me/harness.yaml","iterations":3,"keep":false,"records":null},"lease_ms":60000}"#;
    assert!(include_str!("../../../docs/protocol.md").contains(line));
    assert_eq!(serde_json::to_string(&request).unwrap(), line);

    let status = StatusDoc {
        capabilities: Some(Capabilities {
            pid1: true,
            mode: "pid1".into(),
            landlock_abi: 4,
            uid_model: "uid 65534".into(),
            user_namespace: None,
            agent_user: None,
            requests: vec!["hello".into(), "status".into()],
            features: Vec::new(),
            upload_limits: None,
        }),
        claim: None,
        confinement: None,
        history: vec![status::HistoryEntry {
            duration_ms: 812,
            exit_code: 0,
            iteration: 1,
            meaning: "success".into(),
            reason: None,
            started_at: 1796000000,
        }],
        history_left_out: 0,
        iteration: 2,
        manifest_loaded: true,
        network: Vec::new(),
        processes: vec![
            status::ProcessEntry::Process(status::ProcessInfo {
                cmd: "pitcrew-init serve".into(),
                pid: 1,
                ppid: Some(0),
                uid: Some(0),
            }),
            status::ProcessEntry::More { more: 3 },
        ],
        retention: Some(status::RetentionStatus {
            bytes: Some(268435456),
            deleted: 0,
            deleted_bytes: 0,
            kept: 1,
            kept_bytes: 20480,
            records: Some(100),
        }),
        state: status::RunState::Idle,
        uncollected: Some(status::Uncollected {
            count: 0,
            iterations: Vec::new(),
        }),
        verify: None,
        other: Default::default(),
    };
    documented(
        &Response::Status {
            id: 8,
            status: Box::new(status.clone()),
        },
        r#"{"type":"status","id":8,"status":{"capabilities":{"landlock_abi":4,"mode":"pid1","pid1":true,"requests":["hello","status"],"uid_model":"uid 65534"},"claim":null,"confinement":null,"history":[{"duration_ms":812,"exit_code":0,"iteration":1,"meaning":"success","reason":null,"started_at":1796000000}],"history_left_out":0,"iteration":2,"manifest_loaded":true,"processes":[{"cmd":"pitcrew-init serve","pid":1,"ppid":0,"uid":0},{"more":3}],"retention":{"bytes":268435456,"deleted":0,"deleted_bytes":0,"kept":1,"kept_bytes":20480,"records":100},"state":"idle","uncollected":{"count":0,"iterations":[]}}}"#,
    );

    // A newer supervisor's key is kept and shown; an older one's missing keys read as defaults.
    let mut newer = serde_json::to_value(&status).unwrap();
    newer["warp"] = serde_json::json!({"factor": 9});
    newer["state"] = serde_json::json!("hibernating");
    let read: StatusDoc = serde_json::from_value(newer).unwrap();
    assert_eq!(read.other["warp"], serde_json::json!({"factor": 9}));
    assert_eq!(read.state, status::RunState::Unknown);
    let older: StatusDoc = serde_json::from_str(r#"{"state":"running","iteration":4}"#).unwrap();
    assert_eq!(
        (older.state, older.iteration),
        (status::RunState::Running, 4)
    );
    assert!(older.claim.is_none() && older.uncollected.is_none());
}

#[test]
fn a_response_answers_its_request_and_an_unparsed_ones_error() {
    let ok = Response::ok(7, &());
    assert_eq!(ok.id(), 7);
    assert!(ok.answers(7) && !ok.answers(8));
    let unparsed = Response::Error {
        id: 0,
        kind: ErrorKind::Malformed,
        message: "m".into(),
    };
    assert!(unparsed.answers(8));
    assert!(!Response::ok(0, &()).answers(8));
    let request = Request::Renew { id: 7 };
    assert!(ok.answers(request.id()));
}

#[test]
fn the_tunnel_messages_keep_their_documented_wire_form() {
    let doc = include_str!("../../../docs/protocol.md");
    let requests = [
        (
            Request::Claim {
                id: 10,
                run: "r".into(),
                plan: None,
                lease_ms: Some(60000),
                tunnel: true,
            },
            r#"{"type":"claim","id":10,"run":"r","plan":null,"lease_ms":60000,"tunnel":true}"#,
        ),
        (
            Request::TunnelOpened { conn: 1 },
            r#"{"type":"tunnel_opened","conn":1}"#,
        ),
        (
            Request::TunnelRefused {
                conn: 2,
                reason: "example.com:443 is not allowed".into(),
            },
            r#"{"type":"tunnel_refused","conn":2,"reason":"example.com:443 is not allowed"}"#,
        ),
        (
            Request::TunnelAck {
                conn: 1,
                bytes: 65536,
            },
            r#"{"type":"tunnel_ack","conn":1,"bytes":65536}"#,
        ),
        (
            Request::TunnelInjected {
                conn: 3,
                names: vec!["ANTHROPIC_API_KEY".into()],
            },
            r#"{"type":"tunnel_injected","conn":3,"names":["ANTHROPIC_API_KEY"]}"#,
        ),
        (
            Request::TunnelClose {
                conn: 1,
                reason: "closed".into(),
            },
            r#"{"type":"tunnel_close","conn":1,"reason":"closed"}"#,
        ),
    ];
    for (request, line) in requests {
        assert!(doc.contains(line), "docs/protocol.md lacks {line}");
        assert_eq!(serde_json::to_string(&request).unwrap(), line);
        assert_eq!(serde_json::from_str::<Request>(line).unwrap(), request);
        let tunnel_message = !matches!(request, Request::Claim { .. });
        assert_eq!(request.id() == 0, tunnel_message);
    }
    let responses = [
        (
            Response::TunnelOpen {
                conn: 1,
                host: "api.anthropic.com".into(),
                port: 443,
                model: false,
            },
            r#"{"type":"tunnel_open","conn":1,"host":"api.anthropic.com","port":443}"#,
        ),
        (
            Response::TunnelOpen {
                conn: 3,
                host: "api.anthropic.com".into(),
                port: 443,
                model: true,
            },
            r#"{"type":"tunnel_open","conn":3,"host":"api.anthropic.com","port":443,"model":true}"#,
        ),
        (
            Response::TunnelAck {
                conn: 1,
                bytes: 65536,
            },
            r#"{"type":"tunnel_ack","conn":1,"bytes":65536}"#,
        ),
        (
            Response::TunnelClose {
                conn: 1,
                reason: "closed".into(),
            },
            r#"{"type":"tunnel_close","conn":1,"reason":"closed"}"#,
        ),
    ];
    for (response, line) in responses {
        assert!(doc.contains(line), "docs/protocol.md lacks {line}");
        assert_eq!(serde_json::to_string(&response).unwrap(), line);
        assert_eq!(serde_json::from_str::<Response>(line).unwrap(), response);
        assert!(!response.answers(7));
    }
    assert!(FEATURES.contains(&"network"));
}
