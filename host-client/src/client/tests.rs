//! Unit tests of `client`.

use super::*;
use sha2::Digest as _;

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

/// An offer listing of `lines` files (no files on disk: the tests write their own tar).
fn offer_listing(lines: usize, changed: usize) -> OfferListing {
    let mut bytes = Vec::new();
    for i in 0..lines {
        let sha = if i == changed { "11" } else { "00" }.repeat(32);
        bytes.extend_from_slice(format!("f {sha} 3 - dir{}/file{i}\n", i / 40).as_bytes());
    }
    OfferListing {
        sha256: sha2::Sha256::digest(&bytes).into(),
        lines: lines as u64,
        bytes,
        offered: Default::default(),
    }
}

fn data_frames(c: &Client<&[u8], Vec<u8>>) -> Vec<(Channel, Vec<u8>)> {
    requests(&c.writer.lock().unwrap())
        .into_iter()
        .filter(|f| f.kind == FrameKind::Data)
        .map(|f| (f.channel, f.payload))
        .collect()
}

#[test]
fn an_older_supervisor_gets_the_whole_listing_then_the_tar_of_what_is_needed() {
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
    let listing = offer_listing(1, 9);
    let detail = c
        .upload_listed("/p/x", None, &listing, false, |w, need| {
            assert_eq!(need, &[1u8][..]);
            Ok(w.write_all(b"tar")?)
        })
        .unwrap();
    assert_eq!(detail.counts.get("sent_files"), Some(&serde_json::json!(1)));
    let frames = requests(&c.writer.lock().unwrap());
    let upload: serde_json::Value = frames[0].json().unwrap();
    assert!(upload.get("listing").is_none(), "{upload}");
    assert_eq!(
        data_frames(&c),
        [
            (Channel::Listing, listing.bytes.clone()),
            (Channel::Listing, Vec::new()),
            (Channel::Tar, b"tar".to_vec()),
            (Channel::Tar, Vec::new()),
        ]
    );
}

#[test]
fn a_listing_the_supervisor_holds_is_named_not_sent_and_names_the_manifest_listing() {
    let input = script(&[
        Frame::control(&Response::Need {
            id: 1,
            files: 0,
            bytes: 0,
            need: String::new(),
        }),
        Frame::control(&Response::Ok {
            id: 1,
            detail: serde_json::from_value(serde_json::json!({"kept": true})).unwrap(),
        }),
    ]);
    let mut c = Client::new(&input[..], Vec::new());
    let listing = offer_listing(500, 9);
    c.upload_listed("/p/x", None, &listing, true, |w, need| {
        assert!(need.is_empty());
        Ok(w.write_all(b"")?)
    })
    .unwrap();
    let frames = requests(&c.writer.lock().unwrap());
    let upload: serde_json::Value = frames[0].json().unwrap();
    assert_eq!(upload["listing"]["sha256"], hex::encode(listing.sha256));
    assert_eq!(upload["listing"]["bytes"], listing.bytes.len());
    assert_eq!(upload["listing"]["lines"], 500);
    // No listing frame at all: the tar stream's end only.
    assert_eq!(data_frames(&c), [(Channel::Tar, Vec::new())]);
    assert_eq!(
        c.held_listings.get("/p/x"),
        Some(&hex::encode(listing.sha256))
    );
}

#[test]
fn a_listing_asked_for_goes_as_a_delta_against_the_held_chunks_then_whole_if_asked_again() {
    let held = offer_listing(2000, 9);
    let now = offer_listing(2000, 1500);
    let input = script(&[
        Frame::control(&Response::SendListing {
            id: 1,
            chunks: delta::chunk_digests(&held.bytes),
            reason: "another listing".into(),
        }),
        Frame::control(&Response::SendListing {
            id: 1,
            chunks: Vec::new(),
            reason: "the delta did not rebuild it".into(),
        }),
        Frame::control(&Response::Need {
            id: 1,
            files: 0,
            bytes: 0,
            need: String::new(),
        }),
        Frame::control(&Response::Ok {
            id: 1,
            detail: serde_json::from_value(serde_json::json!({})).unwrap(),
        }),
    ]);
    let mut c = Client::new(&input[..], Vec::new());
    c.upload_listed("/p/x", None, &now, true, |_, _| Ok(()))
        .unwrap();
    let data = data_frames(&c);
    let recipe = delta::recipe(&now.bytes, &delta::chunk_digests(&held.bytes));
    assert!(
        recipe.len() < now.bytes.len() / 10,
        "{} bytes",
        recipe.len()
    );
    assert_eq!(data[0], (Channel::Listing, recipe.clone()));
    assert_eq!(data[1], (Channel::Listing, Vec::new()));
    // The whole listing, asked for again.
    let whole: Vec<u8> = data[2..]
        .iter()
        .take_while(|(ch, b)| *ch == Channel::Listing && !b.is_empty())
        .flat_map(|(_, b)| b.clone())
        .collect();
    assert_eq!(whole, now.bytes);
    let rebuilt = delta::rebuild(
        &recipe,
        &held.bytes,
        &delta::chunks(&held.bytes),
        now.bytes.len() as u64,
    )
    .unwrap();
    assert_eq!(rebuilt, now.bytes);
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

/// A manifest with one tree at `/p/x` whose listing is one file.
fn manifest_with_tree() -> Manifest {
    serde_json::from_value(serde_json::json!({
        "version": 1,
        "runtime": "command",
        "agent": {"binary": "/bin/sh", "args": ["-c", "exit 0"]},
        "workdir": "/work",
        "trees": [{
            "name": "x", "path": "/p/x", "role": "plugin", "kind": "data",
            "format": "pi-tree-v1", "sha256": "0".repeat(64),
            "files": [{"path": "a", "sha256": "1".repeat(64), "size": 3}],
        }],
    }))
    .unwrap()
}

#[test]
fn a_tree_uploaded_by_digest_names_its_held_listing_and_falls_back_to_parts_when_refused() {
    let ok = |id| {
        Frame::control(&Response::Ok {
            id,
            detail: serde_json::from_value(serde_json::json!({})).unwrap(),
        })
    };
    let input = script(&[
        ok(1),
        Frame::control(&Response::Error {
            id: 2,
            kind: ErrorKind::Refused,
            message: "add_listing: tree \"x\": held_listing: the listing held for /p/x is not \
                      what was written"
                .into(),
        }),
        ok(3),
    ]);
    let mut c = Client::new(&input[..], Vec::new());
    c.held_listings.insert("/p/x".into(), "ab".repeat(32));
    c.set_manifest(&manifest_with_tree(), true).unwrap();
    let sent: Vec<serde_json::Value> = requests(&c.writer.lock().unwrap())
        .iter()
        .map(|f| f.json().unwrap())
        .collect();
    assert_eq!(sent[1]["type"], "add_listing");
    assert_eq!(sent[1]["held_listing"], "ab".repeat(32));
    assert!(sent[1]
        .get("files")
        .is_none_or(|f| f == &serde_json::json!([])));
    // Refused: the listing in parts, as to a supervisor without the feature.
    assert_eq!(sent[2]["type"], "add_listing");
    assert!(sent[2].get("held_listing").is_none(), "{}", sent[2]);
    assert_eq!(sent[2]["files"][0]["path"], "a", "{}", sent[2]);
    assert_eq!(sent.len(), 3);
}

/// A `claim` answer (request 1) naming `held` as the destinations holding listings; `None`
/// leaves the field out, as an older supervisor does.
fn claimed(held: Option<&[&str]>) -> Frame {
    let mut detail = serde_json::json!({"claim": {
        "iterations": [], "lease_ms": 60000, "orphaned_at": null, "orphaned_because": null,
        "plan": null, "ready": false, "run": "r1", "silent_ms": 0, "since": 1796000000,
        "state": "held", "stopped": false}});
    if let Some(held) = held {
        let held: serde_json::Map<String, serde_json::Value> = held
            .iter()
            .map(|d| (d.to_string(), serde_json::json!("ab".repeat(32))))
            .collect();
        detail["held_listings"] = serde_json::Value::Object(held);
    }
    Frame::control(&serde_json::json!({"type": "ok", "id": 1, "detail": detail}))
}

fn plan() -> ClaimPlan {
    serde_json::from_value(serde_json::json!({"harness": "h.yaml"})).unwrap()
}

#[test]
fn a_destination_the_claim_names_no_listing_for_gets_its_listing_streamed_unnamed() {
    let input = script(&[
        claimed(Some(&["/p/held"])),
        Frame::control(&Response::Need {
            id: 2,
            files: 1,
            bytes: 3,
            need: "01".into(),
        }),
        Frame::control(&Response::Ok {
            id: 2,
            detail: serde_json::from_value(serde_json::json!({"sent_files": 1})).unwrap(),
        }),
    ]);
    let mut c = Client::new(&input[..], Vec::new());
    // Before the claim nothing is known: a supervisor with the feature may hold anything.
    assert!(c.names_listing("/p/x", true));
    c.claim("r1", plan(), std::time::Duration::from_secs(60), false)
        .unwrap();
    assert!(c.names_listing("/p/held", true));
    assert!(!c.names_listing("/p/x", true));
    assert!(!c.names_listing("/p/held", false));
    let lines = b"d a\nf 0000 3 - a/b\n";
    let sha256: [u8; 32] = sha2::Sha256::digest(lines).into();
    c.upload_streamed(
        "/p/x",
        None,
        true,
        |w| {
            // Written in two pieces, as a walk would: both go out before the `need`.
            w.write_all(&lines[..4])?;
            w.write_all(&lines[4..])?;
            Ok(StreamedListing {
                sha256,
                bytes: lines.len() as u64,
                lines: 2,
                offered: Offered::default(),
            })
        },
        |w, _, need| {
            assert_eq!(need, &[1u8][..]);
            Ok(w.write_all(b"tar")?)
        },
    )
    .unwrap();
    let frames = requests(&c.writer.lock().unwrap());
    let upload: serde_json::Value = frames[1].json().unwrap();
    assert_eq!(upload["type"], "upload");
    assert_eq!(upload["offer"], true);
    assert!(upload.get("listing").is_none(), "{upload}");
    let listing: Vec<u8> = data_frames(&c)
        .into_iter()
        .take_while(|(ch, _)| *ch == Channel::Listing)
        .flat_map(|(_, b)| b)
        .collect();
    assert_eq!(listing, lines);
    // Held now: the next upload there names its listing, and the manifest names it too.
    assert!(c.names_listing("/p/x", true));
    assert_eq!(c.held_listings.get("/p/x"), Some(&hex::encode(sha256)));
}

#[test]
fn a_made_listing_for_an_unheld_destination_follows_the_upload_at_once_and_is_held_after() {
    let input = script(&[
        claimed(Some(&[])),
        Frame::control(&Response::Need {
            id: 2,
            files: 0,
            bytes: 0,
            need: String::new(),
        }),
        Frame::control(&Response::Ok {
            id: 2,
            detail: serde_json::from_value(serde_json::json!({})).unwrap(),
        }),
    ]);
    let mut c = Client::new(&input[..], Vec::new());
    c.claim("r1", plan(), std::time::Duration::from_secs(60), false)
        .unwrap();
    let listing = offer_listing(3, 9);
    c.upload_listed("/p/x", None, &listing, true, |_, _| Ok(()))
        .unwrap();
    let frames = requests(&c.writer.lock().unwrap());
    let upload: serde_json::Value = frames[1].json().unwrap();
    assert!(upload.get("listing").is_none(), "{upload}");
    assert_eq!(
        data_frames(&c)[0],
        (Channel::Listing, listing.bytes.clone())
    );
    assert_eq!(
        c.held_listings.get("/p/x"),
        Some(&hex::encode(listing.sha256))
    );
}

#[test]
fn a_claim_answer_without_held_listings_leaves_every_listing_named() {
    let input = script(&[claimed(None)]);
    let mut c = Client::new(&input[..], Vec::new());
    c.claim("r1", plan(), std::time::Duration::from_secs(60), false)
        .unwrap();
    assert!(c.names_listing("/p/x", true));
    assert!(!c.names_listing("/p/x", false));
}

#[test]
fn a_streamed_listing_that_fails_halfway_is_abandoned_with_the_line_no_supervisor_accepts() {
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
        .upload_streamed(
            "/p/x",
            None,
            true,
            |w| -> anyhow::Result<StreamedListing> {
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
    // Nothing is taken for held.
    assert!(c.held_listings.is_empty());
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
