//! What `pitcrew ps` shows of a sandbox: its fields by name (the `--format` placeholders and the
//! table's columns), `--filter key=value`, relative creation times and the template of
//! `--format`.

use crate::engine::SandboxEntry;
use anyhow::bail;
use pitcrew_core::protocol::status::ClaimStatus;
use serde::Deserialize as _;

/// The fields `--format` names as `{{.Name}}`, in the order `--format json` and the error for
/// an unknown one list them.
pub const FIELDS: [&str; 11] = [
    "ID",
    "Engine",
    "State",
    "Running",
    "Iteration",
    "Created",
    "CreatedAt",
    "Image",
    "Harness",
    "Run",
    "Note",
];

/// The table `ps` prints by default (`--format table`).
pub const DEFAULT_TABLE: &str = "table {{.ID}}\\t{{.Engine}}\\t{{.State}}\\t{{.Iteration}}\\t{{.Created}}\\t{{.Image}}\\t{{.Harness}}\\t{{.Note}}";

/// The keys `--filter` takes.
pub const FILTER_KEYS: [&str; 7] = ["id", "engine", "state", "status", "image", "harness", "run"];

/// The claim and iteration `show_claim` put in `s`'s detail, read back as the status's types.
pub fn claim_of(s: &SandboxEntry) -> (Option<ClaimStatus>, Option<u32>) {
    let claim = s
        .detail
        .get("claim")
        .and_then(|c| ClaimStatus::deserialize(c).ok());
    let iteration = s
        .detail
        .get("iteration")
        .and_then(|n| u32::deserialize(n).ok());
    (claim, iteration)
}

/// When `s` was created, in seconds since the epoch: the local engine records seconds, the
/// container engines and Kubernetes a timestamp (RFC 3339, or `YYYY-MM-DD HH:MM:SS[.frac]
/// +ZZZZ UTC`).
pub fn created_secs(s: &SandboxEntry) -> Option<i64> {
    match &s.detail["created"] {
        serde_json::Value::Number(n) => n.as_i64(),
        serde_json::Value::String(t) => parse_timestamp(t),
        _ => None,
    }
}

/// Seconds since the epoch of `YYYY-MM-DD[T ]HH:MM:SS[.frac][Z|±HH:MM|±HHMM][ UTC…]`.
pub fn parse_timestamp(t: &str) -> Option<i64> {
    let t = t.trim();
    let num = |s: &str| -> Option<i64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let (date, rest) = (t.get(..10)?, t.get(10..)?);
    let sep = rest.chars().next()?;
    if sep != 'T' && sep != ' ' {
        return None;
    }
    let time = rest.get(1..9)?;
    let mut zone = rest.get(9..)?;
    let mut parts = date.split('-');
    let (y, m, d) = (
        num(parts.next()?)?,
        num(parts.next()?)?,
        num(parts.next()?)?,
    );
    let mut hms = time.split(':');
    let (hh, mm, ss) = (num(hms.next()?)?, num(hms.next()?)?, num(hms.next()?)?);
    if let Some(frac) = zone.strip_prefix('.') {
        zone = frac.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let zone = zone.trim_start();
    let offset = match zone.chars().next() {
        None | Some('Z') => 0,
        Some(sign @ ('+' | '-')) => {
            let digits: String = zone[1..]
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == ':')
                .filter(char::is_ascii_digit)
                .collect();
            let (h, mi) = (num(digits.get(..2)?)?, num(digits.get(2..4)?)?);
            let off = h * 3600 + mi * 60;
            if sign == '-' {
                -off
            } else {
                off
            }
        }
        Some(_) => return None,
    };
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    Some(days_from_civil(y, m, d) * 86_400 + hh * 3600 + mm * 60 + ss - offset)
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's days-from-civil algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `secs` since the epoch as RFC 3339 in UTC (`2026-12-01T12:34:56Z`).
pub fn rfc3339(secs: i64) -> String {
    let (y, m, d, hh, mm, ss) = crate::report::utc(u64::try_from(secs).unwrap_or(0));
    format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z")
}

/// How long ago `then` was at `now` (seconds since the epoch), as `podman ps` says it:
/// `45 seconds ago`, `About a minute ago`, `3 minutes ago`, `2 hours ago`, `5 days ago`,
/// `3 weeks ago`, `4 months ago`, `2 years ago`.
pub fn ago(then: i64, now: i64) -> String {
    let secs = (now - then).max(0);
    let plural = |n: i64, unit: &str| {
        if n == 1 {
            format!("1 {unit} ago")
        } else {
            format!("{n} {unit}s ago")
        }
    };
    match secs {
        0 => "Less than a second ago".into(),
        1..=59 => plural(secs, "second"),
        60..=119 => "About a minute ago".into(),
        120..=3_599 => plural(secs / 60, "minute"),
        3_600..=86_399 => plural(secs / 3_600, "hour"),
        86_400..=1_209_599 => plural(secs / 86_400, "day"),
        1_209_600..=5_183_999 => plural(secs / 604_800, "week"),
        5_184_000..=31_535_999 => plural(secs / 2_592_000, "month"),
        _ => plural(secs / 31_536_000, "year"),
    }
}

/// Seconds since the epoch now.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The engine's image of `s` (podman, docker, kubernetes), none for local and exec.
pub fn image(s: &SandboxEntry) -> Option<String> {
    s.detail["image"]
        .as_str()
        .filter(|i| !i.is_empty())
        .map(String::from)
}

/// The value of field `name` (one of [`FIELDS`]) of `s`, unescaped; `-` when it has none.
pub fn field(s: &SandboxEntry, name: &str, now: i64) -> String {
    let (claim, iteration) = claim_of(s);
    let dash = || "-".to_string();
    match name {
        "ID" => s.id.clone(),
        "Engine" => s.engine.clone(),
        "State" => s.state.clone(),
        "Running" => s.running.to_string(),
        "Iteration" => iteration.map_or_else(dash, |n| n.to_string()),
        "Created" => created_secs(s).map_or_else(dash, |t| ago(t, now)),
        "CreatedAt" => created_secs(s).map_or_else(dash, rfc3339),
        "Image" => image(s).unwrap_or_else(dash),
        "Harness" => claim
            .and_then(|c| c.plan)
            .and_then(|p| p.harness)
            .map_or_else(dash, |h| h.display().to_string()),
        "Run" => claim.map_or_else(dash, |c| c.run.to_string()),
        "Note" => s.detail["state_detail"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        _ => dash(),
    }
}

/// `--filter`s: each `key=value`; the same key given twice matches either value, different
/// keys must all match (as `podman ps --filter`).
#[derive(Debug, Default)]
pub struct Filters(Vec<(String, String)>);

impl Filters {
    /// Parses `key=value` pairs; an unknown key or a pair without `=` is an error naming it.
    pub fn parse(pairs: &[String]) -> anyhow::Result<Filters> {
        let mut out = Vec::new();
        for p in pairs {
            let Some((key, value)) = p.split_once('=') else {
                bail!(
                    "--filter {p:?}: not key=value (keys: {})",
                    FILTER_KEYS.join(", ")
                );
            };
            let key = key.trim().to_ascii_lowercase();
            if !FILTER_KEYS.contains(&key.as_str()) {
                bail!(
                    "--filter {p:?}: unknown key {key:?} (keys: {})",
                    FILTER_KEYS.join(", ")
                );
            }
            out.push((key, value.to_string()));
        }
        Ok(Filters(out))
    }

    /// Whether `s` passes every filter.
    pub fn matches(&self, s: &SandboxEntry) -> bool {
        FILTER_KEYS.iter().all(|key| {
            let mut values = self
                .0
                .iter()
                .filter(|(k, _)| k == key || (*key == "state" && k == "status"))
                .peekable();
            if *key == "status" || values.peek().is_none() {
                return true;
            }
            values.any(|(_, v)| one(key, v, s))
        })
    }
}

/// Whether `s` matches one filter `key=v`: `id` by prefix, `engine` exactly, `state` (or
/// `status`) exactly or `running` for any running sandbox, `image`, `harness` and `run` by
/// substring.
fn one(key: &str, v: &str, s: &SandboxEntry) -> bool {
    let (claim, _) = claim_of(s);
    match key {
        "id" => s.id.starts_with(v),
        "engine" => s.engine == v,
        "state" => s.state == v || (v == "running" && s.running),
        "image" => image(s).is_some_and(|i| i.contains(v)),
        "harness" => claim
            .and_then(|c| c.plan)
            .and_then(|p| p.harness)
            .is_some_and(|h| h.display().to_string().contains(v)),
        "run" => claim.is_some_and(|c| c.run.to_string().contains(v)),
        _ => false,
    }
}

/// One piece of a `--format` template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Field(&'static str),
}

/// A `--format` template: text with `{{.Field}}` placeholders (`\t` and `\n` written as such
/// become a tab and a newline); a leading `table ` adds a header and aligns the tab-separated
/// columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Piece>,
    table: bool,
}

impl Template {
    /// Parses `text`; a placeholder that is not `{{.Field}}` of a known field is an error
    /// naming it and the valid fields.
    pub fn parse(text: &str) -> anyhow::Result<Template> {
        let (table, body) = match text.strip_prefix("table") {
            Some(rest) if rest.is_empty() || rest.starts_with(char::is_whitespace) => {
                (true, rest.trim_start())
            }
            _ => (false, text),
        };
        let body = body.replace("\\t", "\t").replace("\\n", "\n");
        let valid = || {
            FIELDS
                .iter()
                .map(|f| format!("{{{{.{f}}}}}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut pieces = Vec::new();
        let mut rest = body.as_str();
        while let Some(start) = rest.find("{{") {
            if start > 0 {
                pieces.push(Piece::Text(rest[..start].to_string()));
            }
            let Some(len) = rest[start..].find("}}") else {
                bail!("--format: {{{{ without }}}} in {text:?}");
            };
            let inner = rest[start + 2..start + len].trim();
            let Some(name) = inner.strip_prefix('.') else {
                bail!(
                    "--format: {{{{{inner}}}}} is not a field: only {{{{.Field}}}} placeholders \
                     are supported ({})",
                    valid()
                );
            };
            let Some(known) = FIELDS.iter().find(|f| **f == name) else {
                bail!("--format: unknown field .{name} (valid: {})", valid());
            };
            pieces.push(Piece::Field(known));
            rest = &rest[start + len + 2..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_string()));
        }
        if table && pieces.is_empty() {
            return Template::parse(DEFAULT_TABLE);
        }
        Ok(Template { pieces, table })
    }

    /// The template applied to `s`, each value escaped for the terminal.
    fn apply(&self, s: &SandboxEntry, now: i64) -> String {
        self.pieces
            .iter()
            .map(|p| match p {
                Piece::Text(t) => t.clone(),
                Piece::Field(f) => crate::report::escape_controls(&field(s, f, now)).into_owned(),
            })
            .collect()
    }

    /// The header of a `table` template: each field's name in capitals.
    fn header(&self) -> String {
        self.pieces
            .iter()
            .map(|p| match p {
                Piece::Text(t) => t.clone(),
                Piece::Field(f) => match *f {
                    "CreatedAt" => "CREATED AT".into(),
                    f => f.to_ascii_uppercase(),
                },
            })
            .collect()
    }

    /// Every sandbox of `list` through the template, a line each (a `table` template: a header
    /// first and its tab-separated columns aligned).
    pub fn render(&self, list: &[SandboxEntry], now: i64) -> String {
        let lines: Vec<String> = list.iter().map(|s| self.apply(s, now)).collect();
        if !self.table {
            return lines.into_iter().map(|l| l + "\n").collect();
        }
        let rows: Vec<Vec<String>> = std::iter::once(self.header())
            .chain(lines)
            .map(|l| l.split('\t').map(String::from).collect())
            .collect();
        align(&rows)
    }
}

/// `rows` as aligned columns two spaces apart; the last column is not padded.
pub fn align(rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = Vec::new();
    for r in rows {
        for (i, cell) in r.iter().enumerate() {
            let w = cell.chars().count();
            match widths.get_mut(i) {
                Some(old) => *old = (*old).max(w),
                None => widths.push(w),
            }
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `s` as `ps --json` prints it: the entry, plus `image` (none for local and exec) and
/// `created_at` (RFC 3339, UTC).
pub fn json(s: &SandboxEntry) -> serde_json::Value {
    let mut v = serde_json::to_value(s).unwrap_or_default();
    v["image"] = image(s).into();
    v["created_at"] = created_secs(s).map(rfc3339).into();
    v
}
