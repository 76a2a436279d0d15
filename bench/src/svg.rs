//! Plots as small hand-written SVG files: a line chart (a value against a
//! size or a number of producers, optionally log-log) and a horizontal bar
//! chart of medians with p99 whiskers on a log axis.
//!
//! Written by hand rather than with a plotting crate so the harness builds
//! quickly and the files stay small and diffable. This module owns layout
//! only; it must never compute statistics (it draws the numbers it is given).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

const PALETTE: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

const W: f64 = 760.0;
const LEFT: f64 = 70.0;
const TOP: f64 = 40.0;

/// One line of a line chart: a name and one value per x (None: not measured).
pub(crate) struct Series {
    pub(crate) name: String,
    pub(crate) values: Vec<Option<f64>>,
}

/// An axis mapping values to pixels, linear or log10.
struct Axis {
    low: f64,
    high: f64,
    log: bool,
}

impl Axis {
    fn fit(values: impl Iterator<Item = f64>, log: bool) -> Axis {
        let (mut low, mut high) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
            low = low.min(v);
            high = high.max(v);
        }
        if !low.is_finite() {
            (low, high) = (1.0, 10.0);
        }
        if log {
            Axis {
                low: 10f64.powf(low.log10().floor()),
                high: 10f64.powf(high.log10().ceil().max(low.log10().floor() + 1.0)),
                log,
            }
        } else {
            Axis {
                low: 0.0,
                high: if high > 0.0 { high * 1.1 } else { 1.0 },
                log,
            }
        }
    }

    /// Position in [0, 1].
    fn frac(&self, v: f64) -> f64 {
        if self.log {
            (v.max(self.low).log10() - self.low.log10()) / (self.high.log10() - self.low.log10())
        } else {
            (v - self.low) / (self.high - self.low)
        }
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let mut ticks = Vec::new();
            let mut t = self.low;
            while t <= self.high * 1.0001 {
                ticks.push(t);
                t *= 10.0;
            }
            ticks
        } else {
            (0..=5)
                .map(|i| self.low + (self.high - self.low) * f64::from(i) / 5.0)
                .collect()
        }
    }
}

fn label(v: f64, unit_us: bool) -> String {
    if unit_us {
        crate::fmt::fmt_us(v)
    } else if v >= 1_000_000.0 {
        format!("{}M", v / 1_000_000.0)
    } else if v >= 1_000.0 {
        format!("{}k", v / 1_000.0)
    } else if v >= 1.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn header(out: &mut String, width: f64, height: f64, title: &str) {
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
        width / 2.0,
        escape(title)
    );
}

fn write(path: &Path, svg: String) -> Result<()> {
    std::fs::write(path, svg).with_context(|| format!("cannot write {}", path.display()))
}

/// A line chart of `series` against `xs`, placed evenly along the x axis.
pub(crate) struct LineChart<'a> {
    pub(crate) title: &'a str,
    pub(crate) x_label: &'a str,
    pub(crate) y_label: &'a str,
    pub(crate) xs: &'a [f64],
    pub(crate) series: &'a [Series],
    /// A log10 y axis.
    pub(crate) log_y: bool,
    /// Label the y axis as durations (the values are µs).
    pub(crate) y_us: bool,
}

/// Where a line chart's plot area is, and how values map into it.
struct Frame {
    plot_w: f64,
    plot_h: f64,
    points: usize,
    y: Axis,
}

impl Frame {
    fn x(&self, i: usize) -> f64 {
        LEFT + self.plot_w * (i as f64 + 0.5) / self.points.max(1) as f64
    }

    fn y(&self, v: f64) -> f64 {
        TOP + self.plot_h * (1.0 - self.y.frac(v))
    }
}

impl LineChart<'_> {
    /// Writes the chart to `path`.
    pub(crate) fn write(&self, path: &Path) -> Result<()> {
        let legend_rows = self.series.len().div_ceil(3) as f64;
        let frame = Frame {
            plot_w: W - LEFT - 30.0,
            plot_h: 300.0,
            points: self.xs.len(),
            y: Axis::fit(
                self.series
                    .iter()
                    .flat_map(|s| s.values.iter().flatten().copied()),
                self.log_y,
            ),
        };
        let height = TOP + frame.plot_h + 60.0 + legend_rows * 18.0;
        let mut out = String::new();
        header(&mut out, W, height, self.title);
        self.axes(&mut out, &frame);
        for (k, s) in self.series.iter().enumerate() {
            line(&mut out, &frame, k, s);
        }
        out.push_str("</svg>\n");
        write(path, out)
    }

    /// The grid, the ticks' labels, the axes' labels and the frame.
    fn axes(&self, out: &mut String, f: &Frame) {
        for t in f.y.ticks() {
            let py = f.y(t);
            let _ = writeln!(
                out,
                r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT + f.plot_w,
                LEFT - 6.0,
                py + 4.0,
                escape(&label(t, self.y_us))
            );
        }
        for (i, x) in self.xs.iter().enumerate() {
            let _ = writeln!(
                out,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                f.x(i),
                TOP + f.plot_h + 18.0,
                label(*x, false)
            );
        }
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + f.plot_w / 2.0,
            TOP + f.plot_h + 36.0,
            escape(self.x_label)
        );
        let _ = writeln!(
            out,
            r#"<text transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            TOP + f.plot_h / 2.0,
            escape(self.y_label)
        );
        let _ = writeln!(
            out,
            r##"<rect x="{LEFT}" y="{TOP}" width="{:.1}" height="{}" fill="none" stroke="#444"/>"##,
            f.plot_w, f.plot_h
        );
    }
}

/// Series number `k`: its line, its points and its legend entry.
fn line(out: &mut String, f: &Frame, k: usize, s: &Series) {
    let color = PALETTE[k % PALETTE.len()];
    let points: Vec<(f64, f64)> = s
        .values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.map(|v| (f.x(i), f.y(v))))
        .collect();
    let polyline: Vec<String> = points
        .iter()
        .map(|(x, y)| format!("{x:.1},{y:.1}"))
        .collect();
    let _ = writeln!(
        out,
        r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
        polyline.join(" ")
    );
    for (x, y) in &points {
        let _ = writeln!(
            out,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="{color}"/>"#
        );
    }
    let lx = LEFT + (k % 3) as f64 * 230.0;
    let ly = TOP + f.plot_h + 56.0 + (k / 3) as f64 * 18.0;
    let _ = writeln!(
        out,
        r#"<rect x="{lx:.1}" y="{:.1}" width="14" height="4" fill="{color}"/><text x="{:.1}" y="{ly:.1}">{}</text>"#,
        ly - 6.0,
        lx + 20.0,
        escape(&s.name)
    );
}

/// One bar: a label, the median and the p99 (drawn as a whisker).
pub(crate) struct Bar {
    pub(crate) label: String,
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    /// Highlighted (the baseline of the chart).
    pub(crate) baseline: bool,
}

/// Horizontal bars of medians (µs) with p99 whiskers, on a log axis.
pub(crate) fn bar_chart(path: &Path, title: &str, x_label: &str, bars: &[Bar]) -> Result<()> {
    // Room for the longest label (about 6.6 px per character at 12 px).
    let longest = bars
        .iter()
        .map(|b| b.label.chars().count())
        .max()
        .unwrap_or(10);
    let left = (longest as f64 * 6.6 + 16.0).clamp(120.0, 420.0);
    let row = 22.0;
    let plot_h = row * bars.len() as f64;
    let height = TOP + plot_h + 50.0;
    let width = left + 480.0;
    let plot_w = width - left - 30.0;
    let x = Axis::fit(bars.iter().flat_map(|b| [b.p50, b.p99]), true);
    let x_pos = |v: f64| left + plot_w * x.frac(v);

    let mut out = String::new();
    header(&mut out, width, height, title);
    for t in x.ticks() {
        let px = x_pos(t);
        let _ = writeln!(
            out,
            r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#ddd"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            TOP + plot_h,
            TOP + plot_h + 16.0,
            escape(&label(t, true))
        );
    }
    for (i, bar) in bars.iter().enumerate() {
        let top = TOP + row * i as f64 + 4.0;
        let color = if bar.baseline {
            "#7f7f7f"
        } else if bar.label.starts_with("inbox") {
            "#1f77b4"
        } else {
            "#ff7f0e"
        };
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            left - 6.0,
            top + 11.0,
            escape(&bar.label)
        );
        let _ = writeln!(
            out,
            r#"<rect x="{left}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="{color}"/>"#,
            (x_pos(bar.p50) - left).max(1.0),
            row - 8.0
        );
        let (a, b) = (x_pos(bar.p50), x_pos(bar.p99.max(bar.p50)));
        let mid = top + (row - 8.0) / 2.0;
        let _ = writeln!(
            out,
            r#"<line x1="{a:.1}" y1="{mid:.1}" x2="{b:.1}" y2="{mid:.1}" stroke="black"/><line x1="{b:.1}" y1="{:.1}" x2="{b:.1}" y2="{:.1}" stroke="black"/>"#,
            mid - 5.0,
            mid + 5.0
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        left + plot_w / 2.0,
        TOP + plot_h + 36.0,
        escape(x_label)
    );
    out.push_str("</svg>\n");
    write(path, out)
}
