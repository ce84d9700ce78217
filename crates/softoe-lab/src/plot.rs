//! SVG plots of sweeps (plotters): a curve says more than a table.

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::coord::ranged1d::ValueFormatter;
use plotters::prelude::*;

/// One named curve.
#[derive(Debug, Clone)]
pub struct Series {
    /// Its legend.
    pub name: String,
    /// (x, y) points, x increasing.
    pub points: Vec<(f64, f64)>,
}

/// Draws `series` on log–log axes into the SVG file `path`.
pub fn log_log(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
) -> Result<()> {
    draw(path, title, x_desc, y_desc, series, true)
}

/// Draws `series` on linear axes from zero into the SVG file `path`.
pub fn linear(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
) -> Result<()> {
    draw(path, title, x_desc, y_desc, series, false)
}

fn draw(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
    log: bool,
) -> Result<()> {
    // Log axes take positive values only; linear ones anything finite.
    let ok = |v: f64| v.is_finite() && (!log || v > 0.0);
    let kept: Vec<Series> = series
        .iter()
        .map(|s| Series {
            name: s.name.clone(),
            points: s
                .points
                .iter()
                .copied()
                .filter(|&(x, y)| ok(x) && ok(y))
                .collect(),
        })
        .collect();
    let all = || kept.iter().flat_map(|s| s.points.iter().copied());
    if all().next().is_none() {
        return Err(anyhow!("nothing to plot for {title}"));
    }
    let lo = |f: &dyn Fn((f64, f64)) -> f64| all().map(f).fold(f64::INFINITY, f64::min);
    let hi = |f: &dyn Fn((f64, f64)) -> f64| all().map(f).fold(f64::NEG_INFINITY, f64::max);
    let (x0, x1, y0, y1) = (lo(&|p| p.0), hi(&|p| p.0), lo(&|p| p.1), hi(&|p| p.1));
    let err = |e: &dyn std::fmt::Display| anyhow!("plotting {}: {e}", path.display());
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(72);
    if log {
        let chart = builder
            .build_cartesian_2d(
                (x0 / 1.5..x1 * 1.5).log_scale(),
                (y0 / 1.5..y1 * 1.5).log_scale(),
            )
            .map_err(|e| err(&e))?;
        finish(chart, x_desc, y_desc, &kept).map_err(|e| err(&e))?;
    } else {
        let pad = |a: f64, b: f64| ((b - a).abs() * 0.08).max(1e-9);
        let chart = builder
            .build_cartesian_2d(x0.min(0.0)..x1 + pad(x0, x1), y0.min(0.0)..y1 + pad(y0, y1))
            .map_err(|e| err(&e))?;
        finish(chart, x_desc, y_desc, &kept).map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Mesh, curves with points, and the legend, on either kind of axes.
fn finish<'a, X, Y>(
    mut chart: ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
) -> Result<(), DrawingAreaErrorKind<std::io::Error>>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(s.name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2))
            });
        chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn writes_an_svg_with_every_series() {
        let dir = std::env::temp_dir().join(format!("softoe-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.svg");
        let s = |name: &str, k: f64| Series {
            name: name.into(),
            points: (0..6)
                .map(|i| (4f64 * 4f64.powi(i), k * (i + 1) as f64))
                .collect(),
        };
        log_log(
            &path,
            "title",
            "size",
            "µs",
            &[s("softoe", 10.0), s("Linux", 20.0)],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        assert!(svg.contains("softoe") && svg.contains("Linux"));
        assert!(log_log(&path, "empty", "x", "y", &[]).is_err());
        // Zero on a linear axis is a point; on a log axis it is dropped.
        let zero = Series {
            name: "from zero".into(),
            points: vec![(0.0, 5.0), (10.0, 7.0)],
        };
        linear(&path, "linear", "µs", "Gb/s", std::slice::from_ref(&zero)).unwrap();
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .contains("from zero")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
