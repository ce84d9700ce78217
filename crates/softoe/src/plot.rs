//! SVG plots of sweeps (plotters): a curve says more than a table.

use std::path::Path;

use anyhow::{Result, anyhow};
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
    let pts = || series.iter().flat_map(|s| s.points.iter().copied());
    let positive = |v: f64| v.is_finite() && v > 0.0;
    let xs: Vec<f64> = pts().map(|p| p.0).filter(|&v| positive(v)).collect();
    let ys: Vec<f64> = pts().map(|p| p.1).filter(|&v| positive(v)).collect();
    if xs.is_empty() || ys.is_empty() {
        return Err(anyhow!("nothing to plot for {title}"));
    }
    let lo = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let (x0, x1) = (lo(&xs) / 1.5, hi(&xs) * 1.5);
    let (y0, y1) = (lo(&ys) / 1.5, hi(&ys) * 1.5);
    let err = |e: &dyn std::fmt::Display| anyhow!("plotting {}: {e}", path.display());
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(|e| err(&e))?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|&(x, y)| positive(x) && positive(y))
            .collect();
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(s.name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2))
            });
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
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
        let _ = std::fs::remove_dir_all(&dir);
    }
}
