//! Line charts for the reproduction report, drawn with the CLI's SVG primitives.

use ssl_cli::svg::{Panel, Svg, colour};

/// One line: a name and (x, y) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
}

/// A chart with a log-scaled x axis when `log_x`.
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
) -> String {
    let tx = |x: f64| if log_x { x.log10() } else { x };
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| tx(p.0)));
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (x0, x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    let (y0, y1) = ys.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    let pad_y = ((y1 - y0) * 0.08).max(1e-3);
    let panel = Panel {
        left: 70.0,
        top: 50.0,
        width: 520.0,
        height: 330.0,
        x_range: (x0, x1 + 1e-9),
        y_range: (y0 - pad_y, y1 + pad_y),
    };
    let mut svg = Svg::new(820.0, 450.0);
    svg.axes(
        &panel,
        title,
        &format!("{x_label}{}", if log_x { " (log10)" } else { "" }),
        y_label,
    );
    for (k, s) in series.iter().enumerate() {
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .map(|(x, y)| (panel.px(tx(*x)), panel.py(*y)))
            .collect();
        svg.polyline(&pts, colour(k), 2.0, s.dashed);
        for p in &pts {
            svg.circle(p.0, p.1, 3.0, colour(k), 1.0, None);
        }
        let ly = 60.0 + 20.0 * k as f64;
        svg.polyline(
            &[(610.0, ly - 4.0), (640.0, ly - 4.0)],
            colour(k),
            2.0,
            s.dashed,
        );
        svg.text(646.0, ly, &s.name, 12.0, "start");
    }
    svg.finish()
}
