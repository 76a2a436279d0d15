//! Summaries of measured samples: medians, p99s, maxima and ratios.
//!
//! Every figure in the report goes through here, so percentiles are computed
//! one way everywhere (nearest rank on the sorted samples, no interpolation).
//! This module must never measure anything itself or drop samples: outliers
//! are the point of a p99.

use serde::{Deserialize, Serialize};

/// The summary of one set of samples, in the samples' unit (µs unless a
/// table says otherwise).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Summary {
    pub(crate) n: usize,
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
    pub(crate) mean: f64,
}

impl Summary {
    /// Summarizes `samples` (any order). An empty set summarizes to zeros
    /// with `n == 0`, which the report prints as "n/a".
    pub(crate) fn of(samples: &[f64]) -> Summary {
        if samples.is_empty() {
            return Summary::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let rank = |q: f64| -> f64 {
            // Nearest rank: the smallest sample with at least q of the set at
            // or below it.
            let index = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
            sorted[index]
        };
        Summary {
            n,
            p50: rank(0.5),
            p99: rank(0.99),
            max: sorted[n - 1],
            mean: sorted.iter().sum::<f64>() / n as f64,
        }
    }

    /// Whether any sample was taken.
    pub(crate) fn is_empty(&self) -> bool {
        self.n == 0
    }
}

/// `value / baseline`, or `None` when the baseline is missing or zero.
pub(crate) fn ratio(value: f64, baseline: f64) -> Option<f64> {
    (baseline > 0.0 && value.is_finite()).then(|| value / baseline)
}

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
    fn nearest_rank_percentiles() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Summary::of(&samples);
        assert_eq!(s.n, 100);
        assert_eq!(s.p50, 50.0);
        assert_eq!(s.p99, 99.0);
        assert_eq!(s.max, 100.0);
        let one = Summary::of(&[7.0]);
        assert_eq!((one.p50, one.p99, one.max), (7.0, 7.0, 7.0));
        assert!(Summary::of(&[]).is_empty());
    }

    #[test]
    fn formats() {
        assert_eq!(fmt_us(830.0), "830 µs");
        assert_eq!(fmt_us(3_210.0), "3.21 ms");
        assert_eq!(fmt_rate(12_345.0), "12.3k/s");
        assert_eq!(fmt_ratio(Some(1.421)), "1.42×");
        assert_eq!(ratio(1.0, 0.0), None);
    }
}
