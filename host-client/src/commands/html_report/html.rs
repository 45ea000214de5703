//! The page's building blocks: escaping, numbers as people read them, the style sheet and the
//! histogram.

use std::fmt::Write as _;

/// `s` as HTML text or attribute value: control and bidi characters written as escapes
/// ([`crate::report::escape_controls`]: they would reorder or hide what is read), then `&`,
/// `<`, `>`, `"` and `'` as character references. Safe in element content and in quoted
/// attribute values, never in a script or style element.
pub fn esc(s: &str) -> String {
    let visible = crate::report::escape_controls(s);
    let mut out = String::with_capacity(visible.len() + 8);
    for c in visible.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A duration: `840 ms`, `12.35 s`, `3 min 05 s`.
pub fn duration(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=59_999 => format!("{:.2} s", ms as f64 / 1000.0),
        _ => format!("{} min {:02} s", ms / 60_000, (ms / 1000) % 60),
    }
}

/// A cost in US dollars: cents, or four decimals below a cent.
pub fn dollars(cost: f64) -> String {
    let digits = if cost != 0.0 && cost < 0.01 { 4 } else { 2 };
    format!("${cost:.digits$}")
}

/// The style sheet: system fonts only, nothing fetched.
pub const STYLE: &str = r#"
:root { color-scheme: light; --ok: #1a7f37; --bad: #cf222e; --warn: #9a6700; --muted: #59636e; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px; color: #1f2328; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px; } h3 { font-size: 15px; margin: 16px 0 6px; }
.muted { color: var(--muted); }
table { border-collapse: collapse; margin: 6px 0 12px; }
th, td { border-bottom: 1px solid #d1d9e0; padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table#jobs td:first-child code { word-break: normal; white-space: nowrap; }
code, .mono { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12.5px; word-break: break-all; }
.ok { color: var(--ok); font-weight: 600; } .bad { color: var(--bad); font-weight: 600; } .warn { color: var(--warn); font-weight: 600; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; margin: 8px 0; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; }
section.iteration { border: 1px solid #d1d9e0; border-radius: 6px; padding: 4px 16px 12px; margin: 16px 0; }
.bar { display: flex; height: 22px; width: 100%; max-width: 900px; border-radius: 3px; overflow: hidden; background: #eef1f4; }
.bar span { display: block; height: 100%; min-width: 2px; }
.s-reap { background: #8c959f; } .s-verify { background: #0969da; } .s-env { background: #8250df; }
.s-launch { background: #bf8700; } .s-run { background: #1a7f37; } .s-final { background: #57606a; }
.legend span { display: inline-block; margin-right: 12px; } .legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; vertical-align: middle; }
.filters { margin: 8px 0; } .filters a { margin-right: 10px; }
table.env td:first-child code { word-break: normal; white-space: nowrap; }
.status { font-weight: 600; }
.status-succeeded { color: var(--ok); } .status-failed, .status-infrastructure { color: var(--bad); }
.status-cancelled, .status-invalid { color: var(--warn); }
svg text { font: 11px system-ui, sans-serif; fill: #1f2328; }
svg rect.hist { fill: #0969da; }
"#;

/// One bin of a histogram: `[from, to)` in milliseconds and how many fell in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bin {
    /// Its lower bound.
    pub from: u64,
    /// Its upper bound (inclusive for the last bin).
    pub to: u64,
    /// How many values fell in it.
    pub count: usize,
}

/// `values` (milliseconds) in at most `bins` bins of equal width (at least 1 ms) from the
/// smallest to the largest; one bin when they are all equal.
pub fn bins(values: &[u64], bins: usize) -> Vec<Bin> {
    let (Some(&min), Some(&max)) = (values.iter().min(), values.iter().max()) else {
        return Vec::new();
    };
    let n = if min == max { 1 } else { bins.max(1) as u64 };
    let width = (max - min).div_ceil(n).max(1);
    let mut out: Vec<Bin> = (0..n)
        .map(|i| Bin {
            from: min + i * width,
            to: min + (i + 1) * width,
            count: 0,
        })
        .collect();
    for &v in values {
        let i = usize::try_from(((v - min) / width).min(n - 1)).unwrap_or(0);
        out[i].count += 1;
    }
    out
}

/// An inline SVG histogram of `bins` (labels are numbers and durations only).
pub fn histogram(bins: &[Bin]) -> String {
    const W: usize = 720;
    const H: usize = 200;
    const LEFT: usize = 36;
    const BOTTOM: usize = 36;
    let top = bins.iter().map(|b| b.count).max().unwrap_or(0).max(1);
    let n = bins.len().max(1);
    let slot = (W - LEFT) / n;
    let plot_h = H - BOTTOM - 22;
    let mut svg = format!(
        "<svg class=\"histogram\" role=\"img\" aria-label=\"job durations\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" xmlns=\"http://www.w3.org/2000/svg\">"
    );
    let base = H - BOTTOM;
    let _ = write!(
        svg,
        "<line x1=\"{LEFT}\" y1=\"{base}\" x2=\"{W}\" y2=\"{base}\" stroke=\"#8c959f\"/><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{top}</text><text x=\"{}\" y=\"{base}\" text-anchor=\"end\">0</text>",
        LEFT - 6,
        base - plot_h + 4,
        LEFT - 6
    );
    for (i, b) in bins.iter().enumerate() {
        let h = b.count * plot_h / top;
        let x = LEFT + i * slot + 2;
        let y = base - h;
        let _ = write!(
            svg,
            "<rect class=\"hist\" x=\"{x}\" y=\"{y}\" width=\"{}\" height=\"{h}\"><title>{} – {}: {} job(s)</title></rect>",
            slot.saturating_sub(4).max(1),
            duration(b.from),
            duration(b.to),
            b.count
        );
        if b.count > 0 {
            let _ = write!(
                svg,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                x + slot / 2 - 2,
                y.saturating_sub(3).max(10),
                b.count
            );
        }
        if i % 2 == 0 || n <= 6 {
            let _ = write!(
                svg,
                "<text x=\"{x}\" y=\"{}\">{}</text>",
                base + 14,
                duration(b.from)
            );
        }
    }
    let _ = write!(
        svg,
        "<text x=\"{W}\" y=\"{}\" text-anchor=\"end\">{}</text></svg>",
        H - 4,
        bins.last().map(|b| duration(b.to)).unwrap_or_default()
    );
    svg
}
