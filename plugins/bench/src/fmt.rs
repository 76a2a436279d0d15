//! The number formats of this report: about three significant digits for
//! rates, ratios, durations, and exact counts and sizes.
//!
//! Every figure the report prints goes through here (its statistics come
//! from the kit's `stats`), so a figure is written one way everywhere. This
//! module must never compute a statistic: it only formats.

/// A rate with 3 significant digits, thousands as k: `81.2`, `812`, `7731`,
/// `12.3k`, `435k`.
pub(crate) fn fmt_rate(per_sec: f64) -> String {
    if !per_sec.is_finite() || per_sec <= 0.0 {
        "n/a".into()
    } else if per_sec >= 10_000.0 {
        format!("{}k", significant(per_sec / 1_000.0))
    } else if per_sec >= 100.0 {
        format!("{per_sec:.0}")
    } else {
        significant(per_sec)
    }
}

/// A ratio: `12.3×`, `1.42×`, `0.087×`.
pub(crate) fn fmt_ratio(ratio: Option<f64>) -> String {
    match ratio {
        Some(r) if r.is_finite() && r >= 10.0 => format!("{r:.1}×"),
        Some(r) if r.is_finite() && r >= 0.1 => format!("{r:.2}×"),
        Some(r) if r.is_finite() => format!("{}×", significant(r)),
        _ => "n/a".into(),
    }
}

/// A duration given in seconds, with a unit that keeps about 3 significant
/// digits readable: `512 ns`, `83.0 µs`, `3.21 ms`, `1.02 s`.
pub(crate) fn fmt_seconds(seconds: f64) -> String {
    if !seconds.is_finite() {
        return "n/a".into();
    }
    let abs = seconds.abs();
    if abs < 1e-6 {
        format!("{} ns", significant(seconds * 1e9))
    } else if abs < 1e-3 {
        format!("{} µs", significant(seconds * 1e6))
    } else if abs < 1.0 {
        format!("{} ms", significant(seconds * 1e3))
    } else {
        format!("{} s", significant(seconds))
    }
}

/// A whole number with thousands separators: `8,589,934,592`.
pub(crate) fn fmt_count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A size in bytes, exact and in MiB: `1,973,757 B (1.88 MiB)`.
pub(crate) fn fmt_bytes(n: u64) -> String {
    format!("{} B ({:.2} MiB)", fmt_count(n), n as f64 / 1_048_576.0)
}

/// A share as a whole percentage: `33 %`.
pub(crate) fn fmt_percent(share: f64) -> String {
    if share.is_finite() {
        format!("{:.0} %", share * 100.0)
    } else {
        "n/a".into()
    }
}

/// 3 significant digits, without an exponent: `1.23`, `12.3`, `123`, `0.0123`.
fn significant(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let magnitude = x.abs().log10().floor() as i32;
    let decimals = (2 - magnitude).max(0) as usize;
    // Rounding may carry into the next magnitude (999.6 -> "1000"); that
    // reads fine and keeps the function simple.
    format!("{x:.decimals$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_rate(81.234), "81.2");
        assert_eq!(fmt_rate(812.4), "812");
        assert_eq!(fmt_rate(7731.2), "7731");
        assert_eq!(fmt_rate(12_345.0), "12.3k");
        assert_eq!(fmt_rate(435_000.0), "435k");
        assert_eq!(fmt_rate(0.0), "n/a");
        assert_eq!(fmt_ratio(Some(12.34)), "12.3×");
        assert_eq!(fmt_ratio(Some(1.423)), "1.42×");
        assert_eq!(fmt_ratio(Some(0.0871)), "0.0871×");
        assert_eq!(fmt_ratio(None), "n/a");
        assert_eq!(fmt_seconds(5.12e-7), "512 ns");
        assert_eq!(fmt_seconds(8.3e-5), "83.0 µs");
        assert_eq!(fmt_seconds(3.214e-3), "3.21 ms");
        assert_eq!(fmt_seconds(1.024), "1.02 s");
        assert_eq!(fmt_count(8_589_934_592), "8,589,934,592");
        assert_eq!(fmt_count(999), "999");
        assert_eq!(fmt_count(1000), "1,000");
        assert_eq!(fmt_bytes(1_973_757), "1,973,757 B (1.88 MiB)");
        assert_eq!(fmt_percent(0.334), "33 %");
    }
}
