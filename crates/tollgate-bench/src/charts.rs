//! Charts as SVG and PNG, their text set in the font shipped with this crate (no system
//! font needed).
//! The percentile axis is logarithmic in 1/(1-p), the usual latency-percentile scale.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::path::Path;

/// A line to draw: name and (percentile, value) points.
pub struct Line {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
}

fn x_of(p: f64) -> f64 {
    // p100 (max) is drawn one decade past p99.99.
    if p >= 100.0 {
        5.0
    } else {
        -(1.0 - p / 100.0).log10()
    }
}

/// The percentile axis's ticks, each where its percentile is (p50 at 0.30, not 0.5).
fn percentile_ticks() -> Vec<(f64, String)> {
    [
        (0.0, "p0"),
        (50.0, "p50"),
        (90.0, "p90"),
        (99.0, "p99"),
        (99.9, "p99.9"),
    ]
    .into_iter()
    .chain([(99.99, "p99.99"), (100.0, "max")])
    .map(|(p, l)| (x_of(p), l.to_owned()))
    .collect()
}

/// A number as an axis shows it: thousands grouped with a space (`70 000`, not
/// `70000.0`), and as many decimals as the axis's step needs.
pub fn number(v: f64, step: f64) -> String {
    // The fewest decimals that write the step itself exactly (0.025: three).
    let decimals = (0..6)
        .find(|&d| {
            let scaled = step.abs() * 10f64.powi(d);
            (scaled - scaled.round()).abs() < 1e-6 * scaled.max(1.0)
        })
        .unwrap_or(6) as usize;
    let text = format!("{:.*}", decimals, v.abs());
    let (int, frac) = text
        .split_once('.')
        .map_or((text.as_str(), ""), |(i, f)| (i, f));
    let mut grouped = String::new();
    for (i, ch) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(' ');
        }
        grouped.push(ch);
    }
    let sign = if v < 0.0 && text.bytes().any(|b| b.is_ascii_digit() && b != b'0') {
        "-"
    } else {
        ""
    };
    match frac {
        "" => format!("{sign}{grouped}"),
        f => format!("{sign}{grouped}.{f}"),
    }
}

/// Draws each tick of the x axis (a short mark, its label and a light grid line) where
/// it is: plotters' own ticks fall on round numbers of the axis's coordinate, which for a
/// percentile or a logarithmic axis are not the values a reader needs labelled.
fn x_ticks<DB: DrawingBackend>(
    chart: &Chart<'_, DB>,
    root: &DrawingArea<DB, plotters::coord::Shift>,
    ticks: &[(f64, String)],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let (ylo, yhi) = {
        let r = chart.y_range();
        (r.start, r.end)
    };
    for (x, label) in ticks {
        let (px, bottom) = chart.backend_coord(&(*x, ylo));
        let (_, top) = chart.backend_coord(&(*x, yhi));
        root.draw(&PathElement::new(
            vec![(px, top), (px, bottom)],
            RGBColor(225, 225, 225).stroke_width(1),
        ))
        .map_err(|e| e.to_string())?;
        root.draw(&PathElement::new(
            vec![(px, bottom), (px, bottom + 5)],
            BLACK.stroke_width(1),
        ))
        .map_err(|e| e.to_string())?;
        let style = TextStyle::from(("sans-serif", 14).into_font()).pos(
            plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Top,
            ),
        );
        root.draw(&Text::new(label.clone(), (px, bottom + 7), style))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// About the step between the y axis's labels over `lo..hi` (a 1, 2 or 5 times a power
/// of ten, as the axis picks them), for [`number`]'s decimals.
fn y_step(lo: f64, hi: f64) -> f64 {
    let raw = ((hi - lo) / 8.0).abs().max(1e-9);
    let unit = 10f64.powf(raw.log10().floor());
    let nice = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .find(|m| m * unit >= raw)
        .unwrap_or(10.0);
    nice * unit
}

/// The chart font, shipped with the crate (DejaVu Sans, cut down to the characters the
/// charts use; licence in `fonts/LICENSE`): a fresh machine without fonts still gets charts.
const FONT: &[u8] = include_bytes!("../fonts/DejaVuSans-subset.ttf");

/// Registers the shipped font once, for both SVG and PNG text.
fn need_font() -> Result<(), String> {
    static READY: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    READY
        .get_or_init(|| {
            plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
                .map_err(|_| "the shipped chart font could not be loaded".to_string())
        })
        .clone()
}

const COLORS: &[RGBColor] = &[
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    y_desc: &str,
    lines: &[Line],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let ys: Vec<f64> = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .collect();
    let (mut lo, mut hi) = (
        ys.iter().cloned().fold(f64::MAX, f64::min),
        ys.iter().cloned().fold(f64::MIN, f64::max),
    );
    if !lo.is_finite() || !hi.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    // The axis spans the values drawn, not from 0: the differences between the lines
    // are what the chart is for.
    let pad = ((hi - lo) * 0.08).max(hi.abs() * 0.01).max(1e-3);
    let (ylo, yhi) = (lo - pad, hi + pad);
    let step = y_step(ylo, yhi);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.1f64..5.2f64, ylo..yhi)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_labels(9)
        .y_label_formatter(&|v: &f64| number(*v, step))
        .light_line_style(RGBColor(238, 238, 238))
        .x_desc("percentile")
        .y_desc(y_desc)
        .draw()
        .map_err(|e| e.to_string())?;
    x_ticks(&chart, &root, &percentile_ticks())?;
    for (i, line) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = line.points.iter().map(|(p, v)| (x_of(*p), *v)).collect();
        let style = if line.dashed {
            color.stroke_width(1)
        } else {
            color.stroke_width(2)
        };
        chart
            .draw_series(LineSeries::new(pts, style))
            .map_err(|e| e.to_string())?
            .label(line.name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    finish(&mut chart, &root)
}

/// Draws one chart on both backends (the drawing code is generic over the backend),
/// writing `<stem>.svg` and `<stem>.png`; evaluates to the file names written.
macro_rules! svg_and_png {
    ($dir:expr, $stem:expr, |$root:ident| $draw:expr) => {{
        need_font()?;
        let svg = $dir.join(format!("{}.svg", $stem));
        {
            let $root = SVGBackend::new(&svg, (960, 540)).into_drawing_area();
            $draw?;
        }
        let png = $dir.join(format!("{}.png", $stem));
        {
            let $root = BitMapBackend::new(&png, (960, 540)).into_drawing_area();
            $draw?;
        }
        Ok(vec![format!("{}.svg", $stem), format!("{}.png", $stem)])
    }};
}

/// A percentile chart (x: percentile on the 1/(1-p) scale), one line per entry.
pub fn percentile_chart(
    dir: &Path,
    stem: &str,
    title: &str,
    y_desc: &str,
    lines: &[Line],
) -> Result<Vec<String>, String> {
    svg_and_png!(dir, stem, |root| draw(root, title, y_desc, lines))
}

/// A line of a requests/s chart: points `(x, median, lowest round, highest round)`;
/// dashed lines (ideal scaling) have no error bars.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64, f64, f64)>,
    pub dashed: bool,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64, f64, f64)>) -> Self {
        Self {
            name: name.into(),
            points,
            dashed: false,
        }
    }
}

/// The x axis of a requests/s chart.
#[derive(Clone, Copy, PartialEq)]
pub enum XAxis {
    /// Concurrency: logarithmic (each doubling the same width), a tick per value.
    Concurrency,
    /// Proxy cores: linear, a tick per value, with ideal scaling drawn.
    Cores,
}

/// Requests/s (y, from 0, thousands grouped) against concurrency or cores (x, a tick per
/// value measured), each point with an error bar from its lowest to its highest round.
pub fn capacity_chart(
    dir: &Path,
    stem: &str,
    title: &str,
    axis: XAxis,
    series: &[Series],
) -> Result<Vec<String>, String> {
    svg_and_png!(dir, stem, |root| draw_xy(root, title, axis, series))
}

fn draw_xy<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    axis: XAxis,
    series: &[Series],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let at = |x: f64| match axis {
        XAxis::Concurrency => x.max(1.0).log2(),
        XAxis::Cores => x,
    };
    let mut xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let (xlo, xhi) = match (xs.first(), xs.last()) {
        (Some(&a), Some(&b)) => (at(a), at(b)),
        _ => (0.0, 1.0),
    };
    let xpad = ((xhi - xlo) * 0.06).max(0.5);
    let ymax = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1.max(p.3)))
        .fold(1.0, f64::max)
        * 1.1;
    let step = y_step(0.0, ymax);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d((xlo - xpad)..(xhi + xpad), 0.0..ymax)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_labels(9)
        .y_label_formatter(&|v: &f64| number(*v, step))
        .light_line_style(RGBColor(238, 238, 238))
        .x_desc(match axis {
            XAxis::Concurrency => "concurrency (connections, log scale)",
            XAxis::Cores => "proxy cores",
        })
        .y_desc("requests/s")
        .draw()
        .map_err(|e| e.to_string())?;
    let ticks: Vec<(f64, String)> = xs.iter().map(|&x| (at(x), number(x, 1.0))).collect();
    x_ticks(&chart, &root, &ticks)?;
    let mut color_of = 0;
    for s in series {
        let color = if s.dashed {
            RGBColor(120, 120, 120)
        } else {
            color_of += 1;
            COLORS[(color_of - 1) % COLORS.len()]
        };
        let pts: Vec<(f64, f64)> = s.points.iter().map(|p| (at(p.0), p.1)).collect();
        let line = if s.dashed {
            chart.draw_series(DashedLineSeries::new(
                pts.clone(),
                6,
                4,
                color.stroke_width(1),
            ))
        } else {
            chart.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
        };
        line.map_err(|e| e.to_string())?
            .label(s.name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        if s.dashed {
            continue;
        }
        chart
            .draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(
                s.points.iter().filter(|p| p.3 > p.2).map(|p| {
                    ErrorBar::new_vertical(at(p.0), p.2, p.1, p.3, color.stroke_width(1), 8)
                }),
            )
            .map_err(|e| e.to_string())?;
    }
    finish(&mut chart, &root)
}

/// Charts are a view of the CSV: a chart that cannot be drawn is a warning, not a failed run.
pub fn soft(r: Result<Vec<String>, String>) -> Vec<String> {
    r.unwrap_or_else(|e| {
        eprintln!("warning: chart not written: {e}");
        Vec::new()
    })
}

type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The legend box and the write-out every chart ends with.
fn finish<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
    root: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::number;

    #[test]
    fn the_shipped_font_loads_without_any_system_font() {
        assert_eq!(super::need_font(), Ok(()));
    }

    #[test]
    fn axis_numbers_group_thousands_and_keep_the_decimals_their_step_needs() {
        assert_eq!(number(70000.0, 10000.0), "70 000");
        assert_eq!(number(1234567.0, 100000.0), "1 234 567");
        assert_eq!(number(999.0, 100.0), "999");
        assert_eq!(number(0.25, 0.05), "0.25");
        assert_eq!(number(1.5, 0.5), "1.5");
        assert_eq!(number(-0.125, 0.025), "-0.125");
        assert_eq!(number(-0.0001, 0.1), "0.0");
        assert_eq!(number(2500.5, 0.5), "2 500.5");
    }

    #[test]
    fn percentile_ticks_sit_where_their_percentiles_are() {
        let ticks = super::percentile_ticks();
        let p50 = ticks.iter().find(|t| t.1 == "p50").unwrap().0;
        assert!((p50 - std::f64::consts::LOG10_2).abs() < 1e-9, "{p50}");
        let p99 = ticks.iter().find(|t| t.1 == "p99").unwrap().0;
        assert!((p99 - 2.0).abs() < 1e-9, "{p99}");
    }
}
