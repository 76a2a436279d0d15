//! The number formats of this report: durations from µs, rates per second
//! and ratios.
//!
//! Every figure the report prints goes through here (its statistics come
//! from the kit's `stats`), so a figure is written one way everywhere. This
//! module must never compute a statistic: it only formats.

/// Formats a duration given in µs with a unit that keeps 3 significant
/// digits readable: `830 µs`, `3.21 ms`, `1.02 s`.
pub(crate) fn fmt_us(us: f64) -> String {
    if !us.is_finite() {
        return "n/a".into();
    }
    let abs = us.abs();
    if abs < 1.0 {
        format!("{us:.2} µs")
    } else if abs < 100.0 {
        format!("{us:.1} µs")
    } else if abs < 1_000.0 {
        format!("{us:.0} µs")
    } else if abs < 100_000.0 {
        format!("{:.2} ms", us / 1_000.0)
    } else if abs < 1_000_000.0 {
        format!("{:.0} ms", us / 1_000.0)
    } else {
        format!("{:.2} s", us / 1_000_000.0)
    }
}

/// Formats a rate per second: `12.3k/s`, `850/s`.
pub(crate) fn fmt_rate(per_sec: f64) -> String {
    if !per_sec.is_finite() || per_sec <= 0.0 {
        "n/a".into()
    } else if per_sec >= 10_000.0 {
        format!("{:.1}k/s", per_sec / 1_000.0)
    } else if per_sec >= 100.0 {
        format!("{per_sec:.0}/s")
    } else {
        format!("{per_sec:.1}/s")
    }
}

/// Formats a ratio: `1.42×`.
pub(crate) fn fmt_ratio(r: Option<f64>) -> String {
    match r {
        Some(r) if r >= 100.0 => format!("{r:.0}×"),
        Some(r) if r >= 10.0 => format!("{r:.1}×"),
        Some(r) => format!("{r:.2}×"),
        None => "n/a".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_us(830.0), "830 µs");
        assert_eq!(fmt_us(3_210.0), "3.21 ms");
        assert_eq!(fmt_rate(12_345.0), "12.3k/s");
        assert_eq!(fmt_ratio(Some(1.421)), "1.42×");
    }
}
