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

fn x_label(x: &f64) -> String {
    match (x * 10.0).round() as i64 {
        0 => "p0".into(),
        3 | 5 => "p50".into(),
        10 => "p90".into(),
        20 => "p99".into(),
        30 => "p99.9".into(),
        40 => "p99.99".into(),
        50 => "max".into(),
        _ => String::new(),
    }
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
    let pad = ((hi - lo) * 0.08).max(1.0);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0f64..5.2f64, (lo.min(0.0) - pad)..(hi + pad))
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_labels(11)
        .x_label_formatter(&x_label)
        .light_line_style(RGBColor(238, 238, 238))
        .x_desc("percentile")
        .y_desc(y_desc)
        .draw()
        .map_err(|e| e.to_string())?;
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

/// Requests/s by concurrency, one line per target.
/// Requests/s (y) against `x_desc` (concurrency, or proxy cores).
pub fn capacity_chart(
    dir: &Path,
    stem: &str,
    title: &str,
    x_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<Vec<String>, String> {
    svg_and_png!(dir, stem, |root| draw_xy(root, title, x_desc, series))
}

fn draw_xy<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    x_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let xmax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..xmax * 1.05, 0.0..ymax * 1.1)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .light_line_style(RGBColor(238, 238, 238))
        .x_desc(x_desc)
        .y_desc("requests/s")
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))
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
    #[test]
    fn the_shipped_font_loads_without_any_system_font() {
        assert_eq!(super::need_font(), Ok(()));
    }
}
