//! A minimal SVG writer for the CLI's figures: panels with axes, points, ellipses and shaded
//! decision regions. Hand-written because the figures need only these few primitives and a
//! plotting crate would add far more build than it saves here.

use std::fmt::Write as _;

/// Class colours (colour-blind-safe Okabe–Ito order, then extras).
pub const PALETTE: [&str; 10] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000",
    "#8C564B", "#7F7F7F",
];

/// Colour of class k.
pub fn colour(k: usize) -> &'static str {
    PALETTE[k % PALETTE.len()]
}

/// An SVG document being written.
#[derive(Debug)]
pub struct Svg {
    body: String,
    width: f64,
    height: f64,
}

/// A rectangular plotting area with data ranges.
#[derive(Debug, Clone, Copy)]
pub struct Panel {
    pub left: f64,
    pub top: f64,
    pub width: f64,
    pub height: f64,
    pub x_range: (f64, f64),
    pub y_range: (f64, f64),
}

impl Panel {
    /// Pixel x of data x.
    pub fn px(&self, x: f64) -> f64 {
        self.left + (x - self.x_range.0) / (self.x_range.1 - self.x_range.0) * self.width
    }
    /// Pixel y of data y (up is up).
    pub fn py(&self, y: f64) -> f64 {
        self.top + self.height
            - (y - self.y_range.0) / (self.y_range.1 - self.y_range.0) * self.height
    }
    /// Whether a data point is inside the ranges.
    pub fn contains(&self, x: f64, y: f64) -> bool {
        (self.x_range.0..=self.x_range.1).contains(&x)
            && (self.y_range.0..=self.y_range.1).contains(&y)
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Round, readable tick values covering `range`.
fn ticks(range: (f64, f64)) -> Vec<f64> {
    let span = range.1 - range.0;
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(raw);
    let mut t = (range.0 / step).ceil() * step;
    let mut out = Vec::new();
    while t <= range.1 + 1e-9 * span {
        out.push(if t.abs() < 1e-12 * span { 0.0 } else { t });
        t += step;
    }
    out
}

/// A tick value printed with as many decimals as the tick step needs (no float noise).
fn tick_label(t: f64, all: &[f64]) -> String {
    let step = if all.len() > 1 {
        (all[1] - all[0]).abs()
    } else {
        1.0
    };
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    format!("{t:.decimals$}")
}

impl Svg {
    /// An empty white canvas.
    pub fn new(width: f64, height: f64) -> Self {
        let mut body = String::new();
        let _ = write!(
            body,
            r#"<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>"#
        );
        Self {
            body,
            width,
            height,
        }
    }

    /// A filled rectangle.
    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, opacity: f64) {
        let _ = write!(
            self.body,
            r#"<rect x="{x:.2}" y="{y:.2}" width="{w:.2}" height="{h:.2}" fill="{fill}" fill-opacity="{opacity}" shape-rendering="crispEdges"/>"#
        );
    }

    /// A circle.
    pub fn circle(
        &mut self,
        x: f64,
        y: f64,
        r: f64,
        fill: &str,
        opacity: f64,
        stroke: Option<&str>,
    ) {
        let stroke = stroke.map_or(String::new(), |s| {
            format!(r#" stroke="{s}" stroke-width="1""#)
        });
        let _ = write!(
            self.body,
            r#"<circle cx="{x:.2}" cy="{y:.2}" r="{r}" fill="{fill}" fill-opacity="{opacity}"{stroke}/>"#
        );
    }

    /// An open or closed line through pixel points.
    pub fn polyline(&mut self, points: &[(f64, f64)], stroke: &str, width: f64, dashed: bool) {
        let pts: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{x:.2},{y:.2}"))
            .collect();
        let dash = if dashed {
            r#" stroke-dasharray="5,3""#
        } else {
            ""
        };
        let _ = write!(
            self.body,
            r#"<polyline points="{}" fill="none" stroke="{stroke}" stroke-width="{width}"{dash}/>"#,
            pts.join(" ")
        );
    }

    /// Text at a pixel position.
    pub fn text(&mut self, x: f64, y: f64, s: &str, size: f64, anchor: &str) {
        let _ = write!(
            self.body,
            r#"<text x="{x:.2}" y="{y:.2}" font-family="sans-serif" font-size="{size}" text-anchor="{anchor}">{}</text>"#,
            esc(s)
        );
    }

    /// Frame, ticks and title of a panel.
    pub fn axes(&mut self, p: &Panel, title: &str, x_label: &str, y_label: &str) {
        let _ = write!(
            self.body,
            r##"<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#333"/>"##,
            p.left, p.top, p.width, p.height
        );
        let xt = ticks(p.x_range);
        for &t in &xt {
            let x = p.px(t);
            self.polyline(
                &[(x, p.top + p.height), (x, p.top + p.height + 4.0)],
                "#333",
                1.0,
                false,
            );
            self.text(
                x,
                p.top + p.height + 16.0,
                &tick_label(t, &xt),
                11.0,
                "middle",
            );
        }
        let yt = ticks(p.y_range);
        for &t in &yt {
            let y = p.py(t);
            self.polyline(&[(p.left - 4.0, y), (p.left, y)], "#333", 1.0, false);
            self.text(p.left - 7.0, y + 4.0, &tick_label(t, &yt), 11.0, "end");
        }
        self.text(p.left + p.width / 2.0, p.top - 10.0, title, 14.0, "middle");
        self.text(
            p.left + p.width / 2.0,
            p.top + p.height + 32.0,
            x_label,
            12.0,
            "middle",
        );
        let (lx, ly) = (p.left - 36.0, p.top + p.height / 2.0);
        let _ = write!(
            self.body,
            r#"<text x="{lx:.2}" y="{ly:.2}" font-family="sans-serif" font-size="12" text-anchor="middle" transform="rotate(-90 {lx:.2} {ly:.2})">{}</text>"#,
            esc(y_label)
        );
    }

    /// The finished document.
    pub fn finish(self) -> String {
        format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">{}</svg>"#,
            self.body,
            w = self.width,
            h = self.height
        ) + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks((0.0, 10.0)), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks((-1.3, 4.2)), vec![0.0, 2.0, 4.0]);
        assert_eq!(ticks((-0.05, 0.05)), vec![-0.04, -0.02, 0.0, 0.02, 0.04]);
    }

    #[test]
    fn tick_labels_have_no_float_noise() {
        let t = ticks((0.155, 0.2));
        assert!(
            t.iter().all(|v| !tick_label(*v, &t).contains("999")),
            "{t:?}"
        );
        assert_eq!(
            tick_label(0.19999999999999997, &[0.18, 0.19999999999999997]),
            "0.20"
        );
        assert_eq!(tick_label(4.0, &[0.0, 2.0, 4.0]), "4");
    }

    #[test]
    fn panel_maps_corners() {
        let p = Panel {
            left: 10.0,
            top: 20.0,
            width: 100.0,
            height: 50.0,
            x_range: (0.0, 1.0),
            y_range: (0.0, 2.0),
        };
        assert_eq!((p.px(0.0), p.py(0.0)), (10.0, 70.0));
        assert_eq!((p.px(1.0), p.py(2.0)), (110.0, 20.0));
    }
}
