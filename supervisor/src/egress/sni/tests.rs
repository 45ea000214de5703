use super::*;

/// ClientHellos captured from real clients connecting to a local listener (the first record
/// the listener received), with the name each asked for.
const FIXTURES: &[(&str, &[u8], Option<&str>)] = &[
    (
        "python ssl (OpenSSL 3.0), TLS 1.3",
        include_bytes!("fixtures/python-tls13-api.anthropic.com.bin"),
        Some("api.anthropic.com"),
    ),
    (
        "python ssl, maximum version TLS 1.2",
        include_bytes!("fixtures/python-tls12-registry.npmjs.org.bin"),
        Some("registry.npmjs.org"),
    ),
    (
        "python ssl without server_hostname",
        include_bytes!("fixtures/python-no-sni.bin"),
        None,
    ),
    (
        "openssl s_client -servername example.com",
        include_bytes!("fixtures/openssl-tls13-example.com.bin"),
        Some("example.com"),
    ),
    (
        "openssl s_client -noservername",
        include_bytes!("fixtures/openssl-no-sni.bin"),
        None,
    ),
    (
        "node 20 tls.connect",
        include_bytes!("fixtures/node20-api.openai.com.bin"),
        Some("api.openai.com"),
    ),
];

/// The handshake message (the ClientHello with its 4-byte header) of a single-record fixture.
fn handshake_of(record: &[u8]) -> &[u8] {
    assert_eq!(record[0], RECORD_HANDSHAKE);
    let len = usize::from(record[3]) << 8 | usize::from(record[4]);
    assert_eq!(record.len(), RECORD_HEADER_LEN + len, "one whole record");
    &record[RECORD_HEADER_LEN..]
}

/// `handshake` carried by records of at most `size` payload bytes each.
fn fragmented(handshake: &[u8], size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in handshake.chunks(size) {
        out.extend_from_slice(&[RECORD_HANDSHAKE, 3, 1]);
        out.extend_from_slice(&u16::try_from(chunk.len()).unwrap().to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

fn u16_be(n: usize) -> [u8; 2] {
    u16::try_from(n).unwrap().to_be_bytes()
}

/// A minimal TLS 1.3 ClientHello in one record carrying `extensions` (type, body) in order.
fn hello(extensions: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]); // random
    body.push(0); // session id
    body.extend_from_slice(&[0, 2, 0x13, 0x01]); // TLS_AES_128_GCM_SHA256
    body.extend_from_slice(&[1, 0]); // null compression
    let mut ext = Vec::new();
    for (kind, data) in extensions {
        ext.extend_from_slice(&kind.to_be_bytes());
        ext.extend_from_slice(&u16_be(data.len()));
        ext.extend_from_slice(data);
    }
    body.extend_from_slice(&u16_be(ext.len()));
    body.extend_from_slice(&ext);
    let mut handshake = vec![HANDSHAKE_CLIENT_HELLO, 0];
    handshake.extend_from_slice(&u16_be(body.len()));
    handshake.extend_from_slice(&body);
    fragmented(&handshake, MAX_RECORD_PAYLOAD)
}

/// A `server_name` extension body listing `names` as (type, name).
fn sni_ext(names: &[(u8, &[u8])]) -> (u16, Vec<u8>) {
    let mut list = Vec::new();
    for (kind, name) in names {
        list.push(*kind);
        list.extend_from_slice(&u16_be(name.len()));
        list.extend_from_slice(name);
    }
    let mut data = u16_be(list.len()).to_vec();
    data.extend_from_slice(&list);
    (EXTENSION_SERVER_NAME, data)
}

/// TLS 1.3's `supported_versions` extension offering TLS 1.3.
fn supported_versions() -> (u16, Vec<u8>) {
    (43, vec![2, 3, 4])
}

fn malformed(input: &[u8]) -> &'static str {
    match server_name(input) {
        Err(SniError::Malformed(why)) => why,
        other => panic!("expected a malformed ClientHello, got {other:?}"),
    }
}

#[test]
fn real_client_hellos_give_the_name_the_client_asked_for() {
    for (client, bytes, want) in FIXTURES {
        assert_eq!(server_name(bytes), Ok(want.map(str::to_owned)), "{client}");
    }
}

#[test]
fn every_truncation_of_a_real_client_hello_needs_more_bytes() {
    for (client, bytes, _) in FIXTURES {
        for cut in 0..bytes.len() {
            assert_eq!(
                server_name(&bytes[..cut]),
                Err(SniError::Incomplete),
                "{client} cut at {cut}"
            );
        }
    }
}

#[test]
fn a_client_hello_arriving_over_several_reads_is_read_once_complete() {
    let (_, bytes, want) = FIXTURES[0];
    let mut buffer = Vec::new();
    let mut answers = Vec::new();
    for read in [1, 4, 6, 100, 3, 200, 203] {
        let start = buffer.len();
        buffer.extend_from_slice(&bytes[start..(start + read).min(bytes.len())]);
        answers.push(server_name(&buffer));
    }
    assert_eq!(buffer.len(), bytes.len());
    let (last, before) = answers.split_last().unwrap();
    assert!(before.iter().all(|a| *a == Err(SniError::Incomplete)));
    assert_eq!(*last, Ok(want.map(str::to_owned)));
}

#[test]
fn a_client_hello_split_over_several_records_gives_the_same_name() {
    for (client, bytes, want) in FIXTURES {
        let handshake = handshake_of(bytes);
        for size in [1, 2, 3, 5, 38, 100, 255] {
            let records = fragmented(handshake, size);
            assert_eq!(
                server_name(&records),
                Ok(want.map(str::to_owned)),
                "{client} in records of {size}"
            );
            for cut in 0..records.len() {
                assert_eq!(
                    server_name(&records[..cut]),
                    Err(SniError::Incomplete),
                    "{client} in records of {size}, cut at {cut}"
                );
            }
        }
    }
}

#[test]
fn bytes_after_the_client_hello_are_ignored() {
    let (_, bytes, want) = FIXTURES[3];
    let mut more = bytes.to_vec();
    more.extend_from_slice(&[0x17, 3, 3, 0, 5, 1, 2, 3, 4, 5]);
    assert_eq!(server_name(&more), Ok(want.map(str::to_owned)));
}

#[test]
fn a_tls13_hello_built_here_reads_its_name_and_keeps_its_case() {
    let bytes = hello(&[
        supported_versions(),
        sni_ext(&[(0, b"Raw.GitHubUserContent.com.")]),
        (10, vec![0, 2, 0, 29]), // supported_groups: x25519
    ]);
    assert_eq!(
        server_name(&bytes),
        Ok(Some("Raw.GitHubUserContent.com.".to_owned()))
    );
    assert_eq!(server_name(&hello(&[supported_versions()])), Ok(None));
}

#[test]
fn a_client_hello_without_extensions_has_no_name() {
    let mut handshake = vec![HANDSHAKE_CLIENT_HELLO, 0, 0, 41, 3, 3];
    handshake.extend_from_slice(&[0; 32]);
    handshake.extend_from_slice(&[0, 0, 2, 0, 0x2f, 1, 0]);
    assert_eq!(server_name(&fragmented(&handshake, 100)), Ok(None));
}

#[test]
fn what_is_not_tls_is_said_from_the_first_byte() {
    assert_eq!(
        server_name(b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"),
        Err(SniError::NotTls(b'G'))
    );
    assert_eq!(server_name(b"C"), Err(SniError::NotTls(b'C')));
    // An SSLv2-compatible hello has no extensions, so no name.
    assert_eq!(
        server_name(&[0x80, 0x2e, 1, 3, 1]),
        Err(SniError::NotTls(0x80))
    );
    assert_eq!(
        server_name(&[0x15, 3, 3, 0, 2, 2, 40]),
        Err(SniError::NotTls(0x15))
    );
    assert_eq!(server_name(&[]), Err(SniError::Incomplete));
}

#[test]
fn a_hello_past_the_cap_is_too_large_before_its_bytes_arrive() {
    // A record header and a ClientHello header claiming 16 KiB.
    let mut bytes = vec![
        RECORD_HANDSHAKE,
        3,
        1,
        0x40,
        0,
        HANDSHAKE_CLIENT_HELLO,
        0,
        0x40,
        0,
    ];
    assert_eq!(server_name(&bytes), Err(SniError::TooLarge));
    bytes[7] = 0xff;
    assert_eq!(server_name(&bytes), Err(SniError::TooLarge));
    // A hello that fits alone but not with the headers of the one-byte records carrying it.
    let padding = (21, vec![0; 3000]);
    let big = hello(&[padding, sni_ext(&[(0, b"example.com")])]);
    assert_eq!(server_name(&big), Ok(Some("example.com".to_owned())));
    let records = fragmented(handshake_of(&big), 1);
    assert!(records.len() > MAX_CLIENT_HELLO_BYTES);
    assert_eq!(server_name(&records), Err(SniError::TooLarge));
    assert_eq!(
        server_name(&records[..MAX_CLIENT_HELLO_BYTES]),
        Err(SniError::TooLarge)
    );
}

#[test]
fn names_a_server_could_read_differently_are_refused() {
    let name = |n: &[u8]| hello(&[sni_ext(&[(0, n)])]);
    assert_eq!(
        malformed(&hello(&[
            sni_ext(&[(0, b"allowed.example")]),
            sni_ext(&[(0, b"evil.example")]),
        ])),
        "two server_name extensions"
    );
    assert_eq!(
        malformed(&hello(&[sni_ext(&[
            (0, b"allowed.example"),
            (0, b"evil.example")
        ])])),
        "more than one server name"
    );
    assert_eq!(
        malformed(&hello(&[sni_ext(&[(1, b"allowed.example")])])),
        "a server name that is not a host name"
    );
    for bad in [
        &b"allowed.example\0.evil.example"[..],
        b"allowed example",
        b"caf\xc3\xa9.example",
        b"allowed.example:443",
        b"allowed.example/x",
        b"[::1]",
    ] {
        assert_eq!(
            malformed(&name(bad)),
            "a server name holding a character no host name holds",
            "{bad:?}"
        );
    }
    for bad in [&b"."[..], b".example", b"a..example"] {
        assert_eq!(
            malformed(&name(bad)),
            "a server name with an empty label",
            "{bad:?}"
        );
    }
    assert_eq!(
        malformed(&name(b"")),
        "a server name that is empty or longer than 254 bytes"
    );
    assert_eq!(
        malformed(&name(&[b'a'; 255])),
        "a server name that is empty or longer than 254 bytes"
    );
    assert_eq!(server_name(&name(&[b'a'; 254])), Ok(Some("a".repeat(254))));
}

#[test]
fn lengths_that_disagree_are_refused() {
    let good = hello(&[sni_ext(&[(0, b"example.com")])]);
    // The name's list claims one byte more than its extension holds.
    let at = good.len() - b"example.com".len() - 5;
    let mut bad = good.clone();
    bad[at + 1] += 1;
    assert_eq!(
        malformed(&bad),
        "the server name list's length disagrees with its extension's"
    );
    // The name claims one byte more than its list holds.
    let mut bad = good.clone();
    bad[at + 4] += 1;
    assert_eq!(
        malformed(&bad),
        "the server name runs past the end of its list"
    );
    // The extensions' length disagrees with the ClientHello's.
    let mut bad = good.clone();
    let ext_len_at = RECORD_HEADER_LEN + HANDSHAKE_HEADER_LEN + 2 + 32 + 1 + 4 + 2;
    bad[ext_len_at + 1] -= 1;
    assert_eq!(
        malformed(&bad),
        "the extensions' length disagrees with the ClientHello's"
    );
    // An empty server_name extension (what a server sends back, never a client).
    assert_eq!(
        malformed(&hello(&[(EXTENSION_SERVER_NAME, vec![])])),
        "an empty server_name extension"
    );
    assert_eq!(
        malformed(&hello(&[(EXTENSION_SERVER_NAME, vec![0, 0])])),
        "an empty server name list"
    );
}

#[test]
fn records_of_another_kind_or_version_are_refused() {
    let (_, bytes, _) = FIXTURES[0];
    let mut records = fragmented(handshake_of(bytes), 100);
    let second = RECORD_HEADER_LEN + 100;
    records[second] = 0x17; // application data inside the handshake
    assert_eq!(
        malformed(&records),
        "a record of another type inside the ClientHello"
    );
    let mut bad = bytes.to_vec();
    bad[1] = 2;
    assert_eq!(
        malformed(&bad),
        "a record version that is not TLS's (3.0 to 3.4)"
    );
    let mut bad = bytes.to_vec();
    bad[5] = 2; // a ServerHello
    assert_eq!(
        malformed(&bad),
        "the first handshake message is not a ClientHello"
    );
    assert_eq!(
        malformed(&[RECORD_HANDSHAKE, 3, 1, 0, 0]),
        "an empty handshake record"
    );
    assert_eq!(
        malformed(&[RECORD_HANDSHAKE, 3, 1, 0x40, 1]),
        "a record longer than 2^14 bytes"
    );
}

/// A deterministic generator of test bytes (xorshift).
struct Bytes(u64);

impl Bytes {
    fn next(&mut self) -> u8 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 24) as u8
    }
}

#[test]
fn any_mutation_of_a_real_hello_gives_an_answer_and_a_name_a_host_could_hold() {
    let mut random = Bytes(0x9e37_79b9_7f4a_7c15);
    for (client, bytes, _) in FIXTURES {
        for at in 0..bytes.len() {
            for value in [0, 1, 0x7f, 0xff, random.next()] {
                let mut mutated = bytes.to_vec();
                mutated[at] = value;
                if let Ok(Some(name)) = server_name(&mutated) {
                    assert!(
                        name.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)),
                        "{client} with byte {at} = {value}: {name:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn random_input_as_long_as_the_cap_never_asks_for_more() {
    let mut random = Bytes(42);
    for round in 0..200 {
        let mut input: Vec<u8> = (0..MAX_CLIENT_HELLO_BYTES).map(|_| random.next()).collect();
        if round % 2 == 0 {
            input[..6].copy_from_slice(&[RECORD_HANDSHAKE, 3, 1, 0x3f, 0xff, 1]);
        }
        assert_ne!(
            server_name(&input),
            Err(SniError::Incomplete),
            "round {round}"
        );
    }
}

#[test]
fn names_match_ignores_case_and_one_trailing_dot() {
    assert!(names_match("API.Anthropic.com", "api.anthropic.com"));
    assert!(names_match("api.anthropic.com.", "api.anthropic.com"));
    assert!(names_match("api.anthropic.com", "API.ANTHROPIC.COM."));
    assert!(!names_match("api.anthropic.com", "anthropic.com"));
    assert!(!names_match("evil.example", "api.anthropic.com"));
    assert!(!names_match("api.anthropic.com..", "api.anthropic.com"));
    assert!(!names_match(".", "."));
    assert!(!names_match("", ""));
}
