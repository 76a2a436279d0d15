//! Summaries of measured samples: percentiles ([`Summary`], for latencies
//! where the tail matters) and the median with its range ([`Spread`], for a
//! few rounds of a rate where the range shows how noisy the machine was),
//! and ratios between two figures.
//!
//! Every figure of both reports goes through here, so a percentile is
//! computed one way everywhere (nearest rank on the sorted samples, no
//! interpolation) and so is a median of rounds (the middle sample, or the
//! mean of the two middle ones). This module must never measure anything
//! itself or drop samples: outliers are the point of a p99.

use serde::{Deserialize, Serialize};

/// The percentiles of one set of samples, in the samples' unit (µs unless
/// a table says otherwise).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Summary {
    /// How many samples.
    pub n: usize,
    /// The median (nearest rank).
    pub p50: f64,
    /// The 99th percentile (nearest rank).
    pub p99: f64,
    /// The largest sample.
    pub max: f64,
    /// The arithmetic mean.
    pub mean: f64,
}

impl Summary {
    /// Summarizes `samples` (any order). An empty set summarizes to zeros
    /// with `n == 0`, which reports print as "n/a".
    pub fn of(samples: &[f64]) -> Summary {
        if samples.is_empty() {
            return Summary::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        Summary {
            n,
            p50: nearest_rank(&sorted, 0.5),
            p99: nearest_rank(&sorted, 0.99),
            max: sorted[n - 1],
            mean: sorted.iter().sum::<f64>() / n as f64,
        }
    }

    /// Whether any sample was taken.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
}

/// The smallest sample with at least `q` of the (sorted, non-empty) set at
/// or below it.
fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    let index = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
    sorted[index]
}

/// The median and range of one set of samples, in the samples' unit, with
/// the samples themselves (in run order) for the raw results.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Spread {
    /// The middle sample (the mean of the two middle ones for an even count).
    pub median: f64,
    /// The smallest sample.
    pub min: f64,
    /// The largest sample.
    pub max: f64,
    /// Every sample, in the order they were taken.
    pub samples: Vec<f64>,
}

impl Spread {
    /// Summarizes `samples` (any order); `None` when there are none, so a
    /// missing figure can never print as a zero.
    pub fn of(samples: &[f64]) -> Option<Spread> {
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
    pub fn gap(&self) -> f64 {
        if self.median == 0.0 {
            f64::NAN
        } else {
            (self.max - self.min) / self.median
        }
    }
}

/// `value / baseline`, or `None` when the baseline is not a positive number
/// or the value is not finite.
pub fn ratio(value: f64, baseline: f64) -> Option<f64> {
    (baseline > 0.0 && value.is_finite()).then(|| value / baseline)
}

/// [`ratio`] of two figures that may be missing.
pub fn ratio_of(value: Option<f64>, baseline: Option<f64>) -> Option<f64> {
    ratio(value?, baseline?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

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
        assert_eq!(ratio(3.0, 2.0), Some(1.5));
        assert_eq!(ratio(1.0, 0.0), None);
        assert_eq!(ratio(f64::INFINITY, 2.0), None);
        assert_eq!(ratio_of(Some(3.0), Some(2.0)), Some(1.5));
        assert_eq!(ratio_of(Some(3.0), Some(0.0)), None);
        assert_eq!(ratio_of(None, Some(2.0)), None);
        assert_eq!(ratio_of(Some(3.0), None), None);
    }
}
