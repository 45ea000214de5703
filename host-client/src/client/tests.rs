//! Unit tests of `client`.

use super::*;

/// Encodes the supervisor's side of a conversation.
fn script(responses: &[Frame]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in responses {
        write_frame(&mut out, f).unwrap();
    }
    out
}

fn requests(bytes: &[u8]) -> Vec<Frame> {
    let mut cursor = bytes;
    let mut out = Vec::new();
    while let Some(f) = read_frame(&mut cursor).unwrap() {
        out.push(f);
    }
    out
}

fn caps() -> Capabilities {
    Capabilities {
        pid1: true,
        mode: "pid1".into(),
        landlock_abi: 0,
        uid_model: "uid from manifest".into(),
        user_namespace: None,
        agent_user: None,
        requests: vec![],
        features: vec![],
        upload_limits: None,
    }
}

#[test]
fn hello_checks_the_version() {
    let input = script(&[Frame::control(&Response::Hello {
        id: 1,
        version: 2,
        supervisor: "x".into(),
        capabilities: Box::new(caps()),
    })]);
    let mut c = Client::new(&input[..], Vec::new());
    assert!(matches!(c.hello(), Err(ClientError::Version { got: 2 })));
}

#[test]
fn run_streams_events_and_output_and_skips_other_ids() {
    let input = script(&[
        Frame::control(&Response::Ok {
            id: 99,
            detail: OkDetail::none(),
        }),
        Frame::control(&Response::Event {
            id: 1,
            iteration: 1,
            step: Step::Reap,
            state: StepState::Started,
            detail: EventDetail::empty(),
        }),
        Frame::data(Channel::Stdout, b"hi\n".to_vec()),
        Frame::control(&Response::Result {
            id: 1,
            iteration: 1,
            record: Box::new({
                let mut r = pitcrew_core::result::IterationResult::new(
                    1,
                    pitcrew_core::result::SupervisorInfo {
                        pid1: true,
                        mode: pitcrew_core::result::SupervisorMode::Pid1,
                        degraded_reason: None,
                    },
                );
                r.finish(0, None);
                r
            }),
            run_stopped: false,
        }),
    ]);
    let mut c = Client::new(&input[..], Vec::new());
    let mut seen = Vec::new();
    let out = c
        .run(None, |u| match u {
            RunUpdate::Event { step, .. } => seen.push(step.to_string()),
            RunUpdate::Output { bytes, .. } => seen.push(String::from_utf8_lossy(bytes).into()),
        })
        .unwrap();
    assert_eq!(out.record.exit_code, 0);
    assert_eq!(out.record.iteration, 1);
    assert_eq!(seen, vec!["reap", "hi\n"]);
}

#[test]
fn errors_name_the_request() {
    let input = script(&[Frame::control(&Response::Error {
        id: 1,
        kind: ErrorKind::NotFound,
        message: "no iteration 7".into(),
    })]);
    let mut c = Client::new(&input[..], Vec::new());
    let err = c.collect(Some(7), |_| Ok(())).unwrap_err();
    assert_eq!(
        err.to_string(),
        "collect iteration 7: refused by the supervisor (not-found): no iteration 7"
    );
    let mut c = Client::new(&[][..], Vec::new());
    assert_eq!(
        c.status(false).unwrap_err().to_string(),
        "status: the sandbox closed the connection before answering"
    );
}

#[test]
fn upload_sends_frames_and_an_end_frame() {
    let input = script(&[Frame::control(&Response::Ok {
        id: 1,
        detail: serde_json::from_value(serde_json::json!({"files": 1})).unwrap(),
    })]);
    let mut c = Client::new(&input[..], Vec::new());
    let big = vec![7u8; DATA_FRAME + 10];
    c.upload("/p/x", None, |w| Ok(w.write_all(&big)?)).unwrap();
    let sent = c.writer.lock().unwrap().clone();
    let frames = requests(&sent);
    assert_eq!(frames.len(), 4);
    assert_eq!(frames[1].payload.len(), DATA_FRAME);
    assert_eq!(frames[2].payload.len(), 10);
    assert!(frames[3].payload.is_empty() && frames[3].channel == Channel::Tar);
}

#[test]
fn collect_reads_the_tar_channel_until_the_empty_frame() {
    let input = script(&[
        Frame::data(Channel::Tar, b"abc".to_vec()),
        Frame::data(Channel::Tar, b"def".to_vec()),
        Frame::data(Channel::Tar, Vec::new()),
        Frame::control(&Response::Ok {
            id: 1,
            detail: OkDetail::none(),
        }),
    ]);
    let mut c = Client::new(&input[..], Vec::new());
    let got = c
        .collect(None, |r| {
            let mut s = String::new();
            r.read_to_string(&mut s)?;
            Ok(s)
        })
        .unwrap();
    assert_eq!(got, "abcdef");
}

#[test]
fn an_offered_listing_goes_out_as_it_is_written_then_the_tar_of_what_is_needed() {
    let input = script(&[
        Frame::control(&Response::Need {
            id: 1,
            files: 1,
            bytes: 3,
            need: "01".into(),
        }),
        Frame::control(&Response::Ok {
            id: 1,
            detail: serde_json::from_value(serde_json::json!({"sent_files": 1})).unwrap(),
        }),
    ]);
    let mut c = Client::new(&input[..], Vec::new());
    let line = b"f 0000000000000000000000000000000000000000000000000000000000000000 3 - a\n";
    let detail = c
        .upload_offered(
            "/p/x",
            None,
            |w| {
                w.write_all(line)?;
                Ok("listed")
            },
            |w, listed, need| {
                assert_eq!((*listed, need), ("listed", &[1u8][..]));
                Ok(w.write_all(b"tar")?)
            },
        )
        .unwrap();
    assert_eq!(detail.counts.get("sent_files"), Some(&serde_json::json!(1)));
    let frames = requests(&c.writer.lock().unwrap());
    let data: Vec<_> = frames[1..]
        .iter()
        .map(|f| (f.channel, f.payload.as_slice()))
        .collect();
    assert_eq!(
        data,
        [
            (Channel::Listing, &line[..]),
            (Channel::Listing, &b""[..]),
            (Channel::Tar, &b"tar"[..]),
            (Channel::Tar, &b""[..]),
        ]
    );
}

#[test]
fn a_listing_that_fails_halfway_is_abandoned_with_the_line_no_supervisor_accepts() {
    // The supervisor refuses the abandoned listing; the client reports its own failure and
    // the connection is ready for the next request.
    let input = script(&[
        Frame::control(&Response::Error {
            id: 1,
            kind: ErrorKind::Refused,
            message: "listing line 2: the host abandoned the listing".into(),
        }),
        Frame::control(&Response::Ok {
            id: 2,
            detail: serde_json::from_value(serde_json::json!({"files": 0})).unwrap(),
        }),
    ]);
    let mut c = Client::new(&input[..], Vec::new());
    let err = c
        .upload_offered(
            "/p/x",
            None,
            |w| -> anyhow::Result<()> {
                w.write_all(b"d src\n")?;
                anyhow::bail!("/host/src/a.txt: open: No such file or directory")
            },
            |_, _, _| panic!("no tar stream after an abandoned listing"),
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "upload /p/x: /host/src/a.txt: open: No such file or directory"
    );
    assert!(matches!(err, ClientError::Local { .. }), "{err:?}");
    c.upload("/p/y", None, |_| Ok(())).unwrap();
    let frames = requests(&c.writer.lock().unwrap());
    assert_eq!(
        frames[1].payload,
        b"d src\n"
            .iter()
            .chain(ABORT_LINE)
            .copied()
            .collect::<Vec<_>>()
    );
    assert!(frames[2].payload.is_empty() && frames[2].channel == Channel::Listing);
    // The shared rule: a line of its own that every supervisor refuses.
    assert!(ABORT_LINE.starts_with(b"\n!"));
}

#[test]
fn a_tar_stream_that_fails_on_this_side_is_left_unended_and_not_waited_on() {
    let input = script(&[Frame::control(&Response::Ok {
        id: 2,
        detail: serde_json::from_value(serde_json::json!({"files": 0})).unwrap(),
    })]);
    let mut c = Client::new(&input[..], Vec::new());
    let err = c
        .upload("/p/x", None, |w| {
            w.write_all(&[0u8; 512])?;
            anyhow::bail!("/host/a.txt: open: No such file or directory")
        })
        .unwrap_err();
    assert!(matches!(err, ClientError::Local { .. }), "{err:?}");
    // Another upload would have its frames taken for the unended stream's: refused here.
    let err = c.upload("/p/y", None, |_| Ok(())).unwrap_err();
    assert!(
        err.to_string().contains("a new connection is needed"),
        "{err}"
    );
    // Had the failed upload waited, it would have taken the next request's answer.
    let answer = c.status(false);
    assert!(
        matches!(answer, Err(ClientError::Unexpected { .. })),
        "{answer:?}"
    );
    let frames = requests(&c.writer.lock().unwrap());
    let ends = frames
        .iter()
        .filter(|f| f.channel == Channel::Tar && f.payload.is_empty())
        .count();
    assert_eq!(ends, 0, "the stream is left unended");
}
