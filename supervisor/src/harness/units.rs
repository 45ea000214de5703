//! The units a harness writes limits in: sizes (`512MiB`, `8GiB`) and durations (`90s`, `15m`).

use super::keys::MAX_MEMORY_BYTES;
use std::time::Duration;

/// Parses a harness memory size: `8GiB`, `512MiB`, `64KiB`, `1TiB` or a number of bytes; from
/// 16 MiB to [`MAX_MEMORY_BYTES`].
pub fn parse_size(s: &str) -> Result<u64, String> {
    parse_size_within(
        s,
        crate::manifest::MIN_MEMORY_BYTES,
        MAX_MEMORY_BYTES,
        "too little for any runtime",
    )
}

/// Parses a harness size (`8GiB`, `512MiB`, `64KiB`, `1TiB` or a number of bytes) of at least
/// `min` and at most `max` bytes; `why` says what a smaller one would be. A larger one (however
/// many digits it has) is refused naming `max`.
pub fn parse_size_within(s: &str, min: u64, max: u64, why: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, ""),
    };
    let example = "e.g. 512MiB, 8GiB or a number of bytes";
    let too_big = || format!("{s:?} is more than {}, the most it may be", human_size(max));
    let n = whole_number(num).ok_or_else(|| format!("{s:?} is not a size ({example})"))?;
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
        .and_then(|n| n.checked_mul(1 << shift))
        .filter(|b| *b <= max)
        .ok_or_else(too_big)?;
    if bytes < min {
        return Err(format!("{s:?} is less than {}, {why}", human_size(min)));
    }
    Ok(bytes)
}

/// `digits` as a number: `None` when it is not one, `Some(None)` when it has more digits than a
/// `u64` holds (past any maximum).
fn whole_number(digits: &str) -> Option<Option<u64>> {
    match digits.parse::<u64>() {
        Ok(n) => Some(Some(n)),
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => Some(None),
        Err(_) => None,
    }
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

/// Parses a duration of at most `max`: `90` (seconds), `90s`, `15m`, `2h`, `500ms`. A longer
/// one (however many digits it has) is refused naming `max`. Zero is a duration: the caller
/// refuses it saying what zero would mean for what it parses.
pub fn parse_duration_at_most(s: &str, max: Duration) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n = whole_number(num)
        .ok_or_else(|| format!("{s:?} is not a duration (e.g. 90, 90s, 15m, 2h, 500ms)"))?;
    let millis_per = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("{s:?} has an unknown unit (use ms, s, m or h)")),
    };
    let d = n
        .and_then(|n| n.checked_mul(millis_per))
        .map(Duration::from_millis)
        .filter(|d| *d <= max)
        .ok_or_else(|| {
            format!(
                "{s:?} is more than {}, the most it may be",
                human_duration(max)
            )
        })?;
    Ok(d)
}

/// `d` in the largest unit that divides it (`168h`, `90s`, `500ms`).
fn human_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (per, unit) in [(3_600_000, "h"), (60_000, "m"), (1000, "s")] {
        if ms >= per && ms % per == 0 {
            return format!("{}{unit}", ms / per);
        }
    }
    format!("{ms}ms")
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
            ("2048TiB", "more than 1024TiB"),
            ("99999999999999999999", "more than 1024TiB"),
            ("18446744073709551615KiB", "more than 1024TiB"),
            ("-1", "not a size"),
        ] {
            let err = parse_size(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
        assert_eq!(
            parse_size_within("1MiB", 1 << 20, 1 << 20, "x"),
            Ok(1 << 20)
        );
        let err = parse_size_within("512KiB", 1 << 20, 1 << 30, "too small a budget").unwrap_err();
        assert!(err.contains("less than 1MiB, too small a budget"), "{err}");
        let err = parse_size_within("2GiB", 1, 1 << 30, "").unwrap_err();
        assert!(err.contains("more than 1GiB, the most it may be"), "{err}");
    }

    #[test]
    fn durations_take_units_and_refuse_past_the_maximum() {
        let hour = Duration::from_secs(3600);
        assert_eq!(
            parse_duration_at_most("90", hour),
            Ok(Duration::from_secs(90))
        );
        assert_eq!(
            parse_duration_at_most("500ms", hour),
            Ok(Duration::from_millis(500))
        );
        assert_eq!(parse_duration_at_most("60m", hour), Ok(hour));
        assert_eq!(parse_duration_at_most("0s", hour), Ok(Duration::ZERO));
        for (bad, why) in [
            ("5d", "unknown unit"),
            ("soon", "not a duration"),
            ("61m", "more than 1h"),
            ("18446744073709551615ms", "more than 1h"),
            ("18446744073709551615h", "more than 1h"),
            ("99999999999999999999", "more than 1h"),
        ] {
            let err = parse_duration_at_most(bad, hour).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
        assert_eq!(human_duration(super::super::keys::MAX_TIMEOUT), "168h");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1500ms");
    }
}
