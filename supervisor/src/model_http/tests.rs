use super::*;

fn cred(name: &str, value: &str) -> Credential {
    Credential {
        name: name.into(),
        placeholder: crate::manifest::model::placeholder(name).into_bytes(),
        value: value.as_bytes().to_vec(),
    }
}

fn creds() -> Vec<Credential> {
    vec![
        cred("ANTHROPIC_API_KEY", "sk-real-1"),
        cred("ANTHROPIC_AUTH_TOKEN", "tok-real-2"),
    ]
}

fn rewriter() -> RequestRewriter {
    RequestRewriter::new(&creds(), "api.example:443", "")
}

/// Feeds `input` in pieces of `split` bytes (every one when 1), returns what went out.
fn feed_split(r: &mut RequestRewriter, input: &[u8], split: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    for piece in input.chunks(split.max(1)) {
        r.feed(piece, &mut out)?;
    }
    Ok(out)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const KEY: &str = "pitcrew-placeholder-ANTHROPIC_API_KEY";

#[test]
fn the_placeholder_is_replaced_host_set_and_the_body_passed_on() {
    let req = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1:4000\r\nX-Api-Key: {KEY}\r\n\
         Content-Length: 5\r\n\r\nhello"
    );
    let mut r = rewriter();
    let out = text(&feed_split(&mut r, req.as_bytes(), 4096).unwrap());
    assert_eq!(
        out,
        "POST /v1/messages HTTP/1.1\r\nHost: api.example:443\r\nX-Api-Key: sk-real-1\r\n\
         Content-Length: 5\r\n\r\nhello"
    );
    assert_eq!(r.take_injected(), ["ANTHROPIC_API_KEY"]);
    assert!(r.take_injected().is_empty(), "each name said once");
}

#[test]
fn every_split_of_pipelined_requests_gives_the_same_bytes() {
    let a = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: {KEY}\r\ncontent-length: 11\r\n\r\n\
         {{\"a\":\"b\"}}\n"
    );
    let b = "POST /v1/messages?beta=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \
             pitcrew-placeholder-ANTHROPIC_AUTH_TOKEN\r\nTransfer-Encoding: chunked\r\n\r\n\
             4;ext=1\r\nwiki\r\n5\r\npedia\r\n0\r\nX-Trailer: 1\r\n\r\n";
    let c = format!("GET /v1/models HTTP/1.1\r\nHost: x\r\nx-api-key: {KEY}\r\n\r\n");
    let all = format!("{a}{b}{c}");
    let whole = feed_split(&mut rewriter(), all.as_bytes(), all.len()).unwrap();
    let whole_text = text(&whole);
    assert_eq!(whole_text.matches("Host: api.example:443\r\n").count(), 3);
    assert_eq!(whole_text.matches("sk-real-1").count(), 2);
    assert!(whole_text.contains("Authorization: Bearer tok-real-2\r\n"));
    // Chunk-size lines written anew (no extension), trailers left out.
    assert!(whole_text.contains("4\r\nwiki\r\n5\r\npedia\r\n0\r\n\r\nGET"));
    assert!(!whole_text.contains("placeholder"));
    for split in [1, 2, 3, 7, 13, 64] {
        let mut r = rewriter();
        assert_eq!(
            feed_split(&mut r, all.as_bytes(), split).unwrap(),
            whole,
            "split {split}"
        );
        let mut names = r.take_injected();
        names.sort();
        assert_eq!(names, ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"]);
    }
}

#[test]
fn a_placeholder_inside_a_body_is_left_alone() {
    let body = format!("{{\"k\":\"{KEY}\"}}");
    let req = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nX-Other: {KEY}\r\n\r\n{body}",
        body.len()
    );
    let out = text(&feed_split(&mut rewriter(), req.as_bytes(), 5).unwrap());
    assert!(out.ends_with(&body), "{out}");
    assert!(out.contains(&format!("X-Other: {KEY}\r\n")), "{out}");
    assert!(!out.contains("sk-real"), "{out}");
}

#[test]
fn the_route_prefix_goes_before_the_target() {
    let mut r = RequestRewriter::new(&creds(), "gw.example", "/anthropic/");
    let out = feed_split(&mut r, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", 100).unwrap();
    assert!(text(&out).starts_with("GET /anthropic/v1/models HTTP/1.1\r\nHost: gw.example\r\n"));
}

#[test]
#[allow(non_snake_case)] // attack tests are named attack_<class>__<case>
fn attack_secrets__a_target_with_a_dot_segment_never_leaves_the_routes_path() {
    for target in ["/../openai/v1/x", "/v1/%2e%2E/x", "/v1/./x", "/a/..?q=1"] {
        let mut r = RequestRewriter::new(&creds(), "gw.example", "/anthropic");
        let req = format!("GET {target} HTTP/1.1\r\nx-api-key: {KEY}\r\n\r\n");
        let mut out = Vec::new();
        let err = r.feed(req.as_bytes(), &mut out).unwrap_err();
        assert!(err.contains("leave the route's path"), "{target}: {err}");
        assert!(!text(&out).contains("sk-real-1"), "{target}");
    }
    // A dot inside a name is no segment.
    let mut r = RequestRewriter::new(&creds(), "gw.example", "/anthropic");
    let out = feed_split(&mut r, b"GET /v1/a..b/.x HTTP/1.1\r\n\r\n", 100).unwrap();
    assert!(text(&out).starts_with("GET /anthropic/v1/a..b/.x HTTP/1.1\r\n"));
}

#[test]
#[allow(non_snake_case)] // attack tests are named attack_<class>__<case>
fn attack_secrets__a_dot_segment_ending_in_an_encoded_slash_never_leaves_the_routes_path() {
    // `..%2f` and `..\` are no `..` segment to a split on `/`, but an upstream that decodes
    // `%2F` before it resolves dot segments (nginx's URI normalisation), or reads `\` as `/`
    // (a WHATWG URL parser: `new URL("/anthropic/v1/..\\..\\admin", base)` is `/admin`),
    // takes `/anthropic/v1/..%2f..%2fadmin` for `/admin`: the key leaves the route's path.
    let mut passed = Vec::new();
    for target in [
        "/v1/..%2f..%2fadmin",
        "/v1/%2e%2e%2F%2e%2e%2Fadmin",
        "/v1/..%5c..%5cadmin",
        "/v1/..\\..\\admin",
    ] {
        let mut r = RequestRewriter::new(&creds(), "gw.example", "/anthropic");
        let req = format!("GET {target} HTTP/1.1\r\nx-api-key: {KEY}\r\n\r\n");
        let mut out = Vec::new();
        let fed = r.feed(req.as_bytes(), &mut out);
        if fed.is_ok() || text(&out).contains("sk-real-1") {
            passed.push(target);
        }
    }
    assert!(passed.is_empty(), "passed on with the key: {passed:?}");
}

#[test]
fn requests_this_side_cannot_frame_for_certain_end_the_connection() {
    for (req, why) in [
        (
            "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            "both",
        ),
        (
            "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            "disagree",
        ),
        (
            "POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\n",
            "Content-Length",
        ),
        (
            "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "only one",
        ),
        (
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            "only one",
        ),
        ("CONNECT a:443 HTTP/1.1\r\n\r\n", "CONNECT"),
        ("GET http://evil.example/ HTTP/1.1\r\n\r\n", "not a path"),
        ("NOT HTTP\r\n\r\n", "not HTTP"),
        (
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "chunk-size",
        ),
        (
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY",
            "CRLF",
        ),
    ] {
        for split in [1, 1000] {
            let err = feed_split(&mut rewriter(), req.as_bytes(), split).unwrap_err();
            assert!(err.contains(why), "{req:?} split {split}: {err}");
        }
    }
    let huge = format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(MAX_HEAD + 10));
    assert!(feed_split(&mut rewriter(), huge.as_bytes(), 1000)
        .unwrap_err()
        .contains("over"));
}

#[test]
fn a_body_cut_short_waits_and_nothing_of_the_next_request_leaks_into_it() {
    let mut r = rewriter();
    let mut out = Vec::new();
    r.feed(
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345",
        &mut out,
    )
    .unwrap();
    assert!(text(&out).ends_with("\r\n\r\n12345"));
    out.clear();
    // The rest of the body holds what looks like a head with a placeholder: it is body.
    r.feed(
        format!("67890GET / HTTP/1.1\r\nx-api-key: {KEY}\r\n\r\n").as_bytes(),
        &mut out,
    )
    .unwrap();
    let t = text(&out);
    assert!(
        t.starts_with("67890GET / HTTP/1.1\r\nHost: api.example:443\r\n"),
        "{t}"
    );
    assert!(t.contains("x-api-key: sk-real-1"), "{t}");
}

#[test]
fn header_replacement_takes_whole_placeholders_only() {
    let c = vec![cred("K", "v1"), cred("K_LONG", "v2"), cred("EMPTYV", "")];
    let mut sorted = c.clone();
    sorted.sort_by_key(|c| std::cmp::Reverse(c.placeholder.len()));
    let cases: &[(&str, &str, &[&str])] = &[
        ("pitcrew-placeholder-K", "v1", &["K"]),
        ("Bearer pitcrew-placeholder-K", "Bearer v1", &["K"]),
        ("pitcrew-placeholder-K_LONG", "v2", &["K_LONG"]),
        (
            "pitcrew-placeholder-K,pitcrew-placeholder-K_LONG pitcrew-placeholder-K",
            "v1,v2 v1",
            &["K", "K_LONG"],
        ),
        // Not whole tokens: left as they are.
        ("pitcrew-placeholder-KX", "pitcrew-placeholder-KX", &[]),
        ("xpitcrew-placeholder-K", "xpitcrew-placeholder-K", &[]),
        (
            "pitcrew-placeholder-K_LONGER",
            "pitcrew-placeholder-K_LONGER",
            &[],
        ),
        ("pitcrew-placeholder-", "pitcrew-placeholder-", &[]),
        ("PITCREW-PLACEHOLDER-K", "PITCREW-PLACEHOLDER-K", &[]),
        // Another credential value altogether: forwarded unchanged.
        ("sk-ant-someone-elses", "sk-ant-someone-elses", &[]),
        ("", "", &[]),
        ("pitcrew-placeholder-EMPTYV", "", &["EMPTYV"]),
    ];
    for (input, want, names) in cases {
        let (out, got) = replace_placeholders(input.as_bytes(), &sorted);
        assert_eq!(text(&out), *want, "{input:?}");
        assert_eq!(got, *names, "{input:?}");
    }
    // Bytes that are not UTF-8 pass through.
    let raw = b"\xff pitcrew-placeholder-K \xfe";
    assert_eq!(replace_placeholders(raw, &sorted).0, b"\xff v1 \xfe");
}

#[test]
fn only_x_api_key_and_authorization_get_values_and_case_does_not_matter() {
    let req = format!(
        "GET / HTTP/1.1\r\nAUTHORIZATION: {KEY}\r\nx-API-key: {KEY}\r\n\
         Proxy-Authorization: {KEY}\r\nCookie: {KEY}\r\n\r\n"
    );
    let out = text(&feed_split(&mut rewriter(), req.as_bytes(), 9).unwrap());
    assert!(out.contains("AUTHORIZATION: sk-real-1\r\n"), "{out}");
    assert!(out.contains("x-API-key: sk-real-1\r\n"), "{out}");
    assert!(
        out.contains(&format!("Proxy-Authorization: {KEY}\r\n")),
        "{out}"
    );
    assert!(out.contains(&format!("Cookie: {KEY}\r\n")), "{out}");
    assert!(
        out.starts_with("GET / HTTP/1.1\r\nHost: api.example:443\r\n"),
        "{out}"
    );
}

#[test]
fn the_debug_form_of_a_credential_has_no_value() {
    let shown = format!("{:?}", cred("K", "sk-secret"));
    assert!(
        shown.contains('K') && !shown.contains("sk-secret"),
        "{shown}"
    );
}

#[test]
fn an_upgrade_is_never_offered_to_the_upstream() {
    let req = b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n";
    let out = text(&feed_split(&mut rewriter(), req, 3).unwrap());
    assert!(!out.to_ascii_lowercase().contains("upgrade: "), "{out}");
    assert!(out.ends_with("Connection: Upgrade\r\n\r\n"), "{out}");
}

/// The body of the first request in `out` as a parser that ends a chunk line at a bare LF
/// reads it (Go's net/http before 1.24.2, CVE-2025-22871, and the other "funky chunks"
/// parsers): chunk data concatenated, `None` when that parser would refuse it.
fn lenient_chunked_body(out: &[u8]) -> Option<Vec<u8>> {
    let mut at = out.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let mut body = Vec::new();
    loop {
        let lf = out[at..].iter().position(|b| *b == b'\n')?;
        let line = &out[at..at + lf];
        at += lf + 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let size_text = line.split(|b| *b == b';').next()?;
        let size = usize::from_str_radix(std::str::from_utf8(size_text).ok()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(out.get(at..at + size)?);
        at += size;
        if out.get(at..at + 2)? != b"\r\n" {
            return None;
        }
        at += 2;
    }
}

/// A chunk-size line whose extension holds a bare LF: this side reads the line up to the
/// CRLF (httparse takes any byte in an extension), an upstream that ends the line at the LF
/// reads the next bytes as chunk data and the following "size" as a new chunk covering the
/// next request head, the one the key was put in. The key lands in the body of an
/// authenticated request (a file upload, a prompt) the provider may give back.
#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_secrets__bare_lf_in_a_chunk_extension_puts_the_key_in_a_body() {
    let head_a = "POST /v1/files HTTP/1.1\r\nHost: x\r\nx-api-key: pitcrew-placeholder-ANTHROPIC_API_KEY\r\nTransfer-Encoding: chunked\r\n\r\n";
    let head_b = format!(
        "GET /v1/models HTTP/1.1\r\nHost: x\r\nx-api-key: {KEY}\r\nContent-Length: 30\r\n\r\n"
    );
    // What the upstream will see of head B once rewritten (the agent can guess the key's
    // length: a provider's keys have one).
    let head_b_out = "GET /v1/models HTTP/1.1\r\nHost: api.example:443\r\nx-api-key: sk-real-1\r\nContent-Length: 30\r\n\r\n";
    let pad = 30 - "\r\n0\r\n\r\n".len();
    let covered = "0\r\n\r\n".len() + head_b_out.len() + pad;
    let size = format!("{covered:03x}");
    assert_eq!(size.len(), 3);
    // This side: size 3 (ext "a\nabc"), data = the hex text, CRLF, last chunk, head B.
    // Upstream: size 3 at the LF, data "abc", CRLF, chunk of `covered` bytes, last chunk.
    let attack = format!(
        "{head_a}3;a\nabc\r\n{size}\r\n0\r\n\r\n{head_b}{}\r\n0\r\n\r\n",
        "z".repeat(pad)
    );
    match feed_split(&mut rewriter(), attack.as_bytes(), 4096) {
        Err(_) => {}
        Ok(out) => {
            let body = lenient_chunked_body(&out).expect("the lenient upstream takes it");
            assert!(
                !text(&body).contains("sk-real-1"),
                "the key is in the body of request A as the upstream reads it: {:?}",
                text(&body)
            );
        }
    }
}

/// A trailer line ending in a bare LF followed by CRLF: an upstream that takes a bare LF as a
/// line end ends the trailers there and reads what this side still takes for trailer lines
/// as a request head: one this side never rewrote (the agent's `Host`, a path outside the
/// route's prefix).
#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_egress__bare_lf_in_a_trailer_smuggles_an_unrewritten_request() {
    let mut r = RequestRewriter::new(&creds(), "api.example:443", "/v1");
    let attack = "POST /chat HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
                  0\r\na: b\n\r\nGET /escape HTTP/1.1\r\nHost: elsewhere.example\r\n\r\n";
    if let Ok(out) = feed_split(&mut r, attack.as_bytes(), 4096) {
        let out = text(&out);
        assert!(out.starts_with("POST /v1/chat HTTP/1.1\r\n"), "{out:?}");
        assert!(
            !out.contains("\n\r\nGET /escape HTTP/1.1\r\nHost: elsewhere.example\r\n"),
            "a request head passed on unrewritten: {out:?}"
        );
    }
}

/// `Transfer-Encoding: chunked` on an HTTP/1.0 request: this side passes a chunked body on,
/// while RFC 9112 6.1 says such framing is faulty and Go's net/http ignores the header for
/// HTTP/1.0 (no body): the chunk data, a request head this side never rewrote, is the
/// upstream's next request.
#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_egress__http_1_0_with_transfer_encoding_is_refused() {
    let smuggled = "GET /escape HTTP/1.1\r\nHost: elsewhere.example\r\n\r\n";
    let attack = format!(
        "POST /chat HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n\
         {:x}\r\n{smuggled}\r\n0\r\n\r\n",
        smuggled.len()
    );
    let mut r = RequestRewriter::new(&creds(), "api.example:443", "/v1");
    assert!(
        feed_split(&mut r, attack.as_bytes(), 4096).is_err(),
        "HTTP/1.0 with Transfer-Encoding passed on"
    );
}
