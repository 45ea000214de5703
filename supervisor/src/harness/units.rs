//! The units a harness writes limits in: sizes (`512MiB`, `8GiB`) and durations (`90s`, `15m`).

use std::time::Duration;

/// Parses a harness size: `8GiB`, `512MiB`, `64KiB`, `1TiB` or a number of bytes; at least
/// 16 MiB.
pub fn parse_size(s: &str) -> Result<u64, String> {
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
        .filter(|b| *b <= MAX_MEMORY_BYTES)
        .ok_or_else(|| format!("{s:?} is more than 1024 TiB"))?;
    if bytes < crate::manifest::MIN_MEMORY_BYTES {
        return Err(format!(
            "{s:?} is less than 16MiB, too little for any runtime"
        ));
    }
    Ok(bytes)
}

/// The largest `memory:` a harness may ask for (1024 TiB: past any machine's, short of overflow).
const MAX_MEMORY_BYTES: u64 = 1 << 50;

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
    }
}
