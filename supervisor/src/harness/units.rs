//! The units a harness writes limits in: sizes (`512MiB`, `8GiB`) and durations (`90s`, `15m`).

use std::time::Duration;

/// Parses a harness memory size: `8GiB`, `512MiB`, `64KiB`, `1TiB` or a number of bytes; at
/// least 16 MiB.
pub fn parse_size(s: &str) -> Result<u64, String> {
    parse_size_at_least(
        s,
        crate::manifest::MIN_MEMORY_BYTES,
        "too little for any runtime",
    )
}

/// Parses a harness size (`8GiB`, `512MiB`, `64KiB`, `1TiB` or a number of bytes) of at least
/// `min` bytes and at most 1024 TiB; `why` says what a smaller one would be.
pub fn parse_size_at_least(s: &str, min: u64, why: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, ""),
    };
    let example = "e.g. 512MiB, 8GiB or a number of bytes";
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size ({example})"))?;
    let shift = match unit.trim_start() {
        "" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        "TiB" => 40,
        _ => {
            return Err(format!(
                "{s:?} has an unknown unit (use KiB, MiB, GiB or TiB)"
            ))
        }
    };
    let bytes = n
        .checked_mul(1 << shift)
        .filter(|b| *b <= MAX_SIZE_BYTES)
        .ok_or_else(|| format!("{s:?} is more than 1024 TiB"))?;
    if bytes < min {
        return Err(format!("{s:?} is less than {}, {why}", human_size(min)));
    }
    Ok(bytes)
}

/// `bytes` in the largest binary unit that divides it (`16MiB`, `1MiB`, `4096`).
fn human_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes % (1 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// The largest size a harness may ask for (1024 TiB: past any machine's, short of overflow).
const MAX_SIZE_BYTES: u64 = 1 << 50;

/// Parses a duration: `90` (seconds), `90s`, `15m`, `2h`, `500ms`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 90, 90s, 15m, 2h, 500ms)"))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        _ => return Err(format!("{s:?} has an unknown unit (use ms, s, m or h)")),
    };
    if d.is_zero() {
        return Err("a timeout of zero would kill the agent at once".to_string());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_units_and_refuse_the_rest() {
        assert_eq!(parse_size("8GiB"), Ok(8 << 30));
        assert_eq!(parse_size("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_size("33554432"), Ok(32 << 20));
        for (bad, why) in [
            ("8GB", "unknown unit"),
            ("1MiB", "less than 16MiB"),
            ("lots", "not a size"),
            ("2048TiB", "more than 1024 TiB"),
            ("99999999999999999999", "not a size"),
        ] {
            let err = parse_size(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
        assert_eq!(parse_size_at_least("1MiB", 1 << 20, "x"), Ok(1 << 20));
        let err = parse_size_at_least("512KiB", 1 << 20, "too small a budget").unwrap_err();
        assert!(err.contains("less than 1MiB, too small a budget"), "{err}");
    }
}
