//! Summaries of measured samples (median and range) and the number formats
//! the report prints.
//!
//! Every figure in the report goes through here, so a median is computed one
//! way everywhere (the middle sample, or the mean of the two middle ones).
//! This module must never measure anything itself or drop samples: the
//! range is there to show how noisy the machine was.

use serde::Serialize;

/// The median and range of one set of samples, in the samples' unit, with
/// the samples themselves (in run order) for the raw results.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Spread {
    /// The middle sample (the mean of the two middle ones for an even count).
    pub(crate) median: f64,
    /// The smallest sample.
    pub(crate) min: f64,
    /// The largest sample.
    pub(crate) max: f64,
    /// Every sample, in the order they were taken.
    pub(crate) samples: Vec<f64>,
}

impl Spread {
    /// Summarizes `samples` (any order); `None` when there are none, so a
    /// missing figure can never print as a zero.
    pub(crate) fn of(samples: &[f64]) -> Option<Spread> {
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let (&min, &max) = (sorted.first()?, sorted.last()?);
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min,
            max,
            samples: samples.to_vec(),
        })
    }

    /// The gap between the slowest and the fastest sample as a share of the
    /// median: how much the rounds disagreed.
    pub(crate) fn gap(&self) -> f64 {
        if self.median == 0.0 {
            f64::NAN
        } else {
            (self.max - self.min) / self.median
        }
    }
}

/// `value / baseline`, or `None` when either is missing or the baseline is
/// not a positive number.
pub(crate) fn ratio(value: Option<f64>, baseline: Option<f64>) -> Option<f64> {
    match (value, baseline) {
        (Some(v), Some(b)) if b > 0.0 && v.is_finite() => Some(v / b),
        _ => None,
    }
}

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
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn median_of_odd_and_even_counts_and_the_range() {
        let odd = Spread::of(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!((odd.median, odd.min, odd.max), (3.0, 1.0, 5.0));
        assert_eq!(odd.samples, [5.0, 1.0, 3.0], "samples keep run order");
        let even = Spread::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(even.median, 2.5);
        assert!((even.gap() - 1.2).abs() < 1e-12);
        assert_eq!(Spread::of(&[]), None);
    }

    #[test]
    fn ratios_need_both_figures_and_a_positive_baseline() {
        assert_eq!(ratio(Some(3.0), Some(2.0)), Some(1.5));
        assert_eq!(ratio(Some(3.0), Some(0.0)), None);
        assert_eq!(ratio(None, Some(2.0)), None);
        assert_eq!(ratio(Some(3.0), None), None);
    }

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
